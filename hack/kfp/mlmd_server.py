"""ML Metadata's gRPC service (``ml_metadata.MetadataStoreService``) over the PyPI ``ml-metadata`` wheel's store.

KFP 2.17's driver and launcher (and the UI, through a grpc-web proxy) talk to ML Metadata over gRPC. MLMD's own
server is C++ built with Bazel and cannot be built here; the PyPI wheel ``ml-metadata`` 1.17.1 (cp311) ships
MLMD's C++ ``MetadataStore`` itself, wrapped with one function per RPC that takes the serialized request and
returns the serialized response, an error message and a status code (``ml_metadata/metadata_store/pywrap``).
This program puts a gRPC server in front of those functions: each RPC's request bytes go to the function of the
same name unparsed and its response bytes come back unparsed, so the store's behaviour is MLMD's own, not ours.
The status codes are absl's, which are gRPC's (same numbers). 49 of the service's 52 RPCs have a function in the
wheel: every one the KFP driver, launcher and UI call. The other three
(``GetParentContextsByContexts``, ``GetChildrenContextsByContexts``, ``GetLineageGraph``) answer UNIMPLEMENTED
naming themselves.

The store is MLMD's SQLite backend (``--sqlite FILE``; ``:memory:`` for a throw-away one) or MySQL/MariaDB
(``--mysql HOST:PORT/DATABASE`` with ``--mysql-user``/``MLMD_MYSQL_PASSWORD``). Calls are served one at a time
(a lock around the store: MLMD's store object is not thread-safe; KFP's metadata traffic is small).
Message size limits are 100 MB each way, as KFP needs for large pipelines (kubeflow/pipelines#11949).

It runs with the Python of a virtual environment that has ``ml-metadata==1.17.1`` (``hack/kfp/mlmd_venv.sh``
makes one): that wheel pins ``protobuf<5``, which TensorFlow 2.21 and kfp 2.17 (the project's own environment)
do not allow, so it cannot share the project's environment.

    python hack/kfp/mlmd_server.py --listen 127.0.0.1:8080 --sqlite /var/lib/mlmd/metadata.sqlite

It prints ``listening on HOST:PORT`` once it serves (``--listen HOST:0`` picks a free port) and stops on
SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from concurrent import futures

import grpc
from ml_metadata.metadata_store.pywrap.metadata_store_extension import metadata_store as _cc
from ml_metadata.proto import metadata_store_pb2, metadata_store_service_pb2

SERVICE = "ml_metadata.MetadataStoreService"
MAX_MESSAGE_BYTES = 100 * 1024 * 1024  # KFP's own limit for its MLMD client (kubeflow/pipelines#11949)
_STATUS = {code.value[0]: code for code in grpc.StatusCode}


def rpc_names() -> list[str]:
    """The RPCs of ``ml_metadata.MetadataStoreService``, from the wheel's own service descriptor (52 in 1.17.1)."""
    service = metadata_store_service_pb2.DESCRIPTOR.services_by_name["MetadataStoreService"]
    return [method.name for method in service.methods]


def served_rpcs() -> list[str]:
    """The RPCs that the wheel's store has a function for (49 of 52 in 1.17.1); the others answer UNIMPLEMENTED."""
    return [name for name in rpc_names() if callable(getattr(_cc, name, None))]


def connection_config(sqlite: str | None = None, mysql: str | None = None, mysql_user: str = "root",
                      mysql_password: str = "") -> metadata_store_pb2.ConnectionConfig:
    """MLMD's ConnectionConfig for a SQLite file (``sqlite``, a path or ``:memory:``) or a MySQL/MariaDB database
    (``mysql`` as ``HOST:PORT/DATABASE``). Exactly one of the two. Raises ValueError naming the bad input."""
    if (sqlite is None) == (mysql is None):
        raise ValueError("give exactly one store: --sqlite FILE or --mysql HOST:PORT/DATABASE")
    config = metadata_store_pb2.ConnectionConfig()
    if sqlite is not None:
        config.sqlite.filename_uri = sqlite
        config.sqlite.connection_mode = metadata_store_pb2.SqliteMetadataSourceConfig.READWRITE_OPENCREATE
        return config
    address, _, database = mysql.partition("/")
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not database:
        raise ValueError(f"--mysql {mysql!r}: expected HOST:PORT/DATABASE, e.g. 10.0.0.5:3306/metadb")
    config.mysql.host = host
    config.mysql.port = int(port)
    config.mysql.database = database
    config.mysql.user = mysql_user
    config.mysql.password = mysql_password
    config.mysql.create_if_not_exists = True
    return config


class MetadataStoreAdapter:
    """One MLMD store (MLMD's C++ ``MetadataStore`` from the wheel) behind a generic gRPC service handler.

    The store is created (and its schema made or upgraded) when the adapter is; every RPC takes the store's lock.
    """

    def __init__(self, config: metadata_store_pb2.ConnectionConfig):
        migration = metadata_store_pb2.MigrationOptions(enable_upgrade_migration=True)
        self._store = _cc.CreateMetadataStore(config.SerializeToString(), migration.SerializeToString())
        self._lock = threading.Lock()
        self.served = served_rpcs()

    def _handler(self, name: str) -> grpc.RpcMethodHandler:
        function = getattr(_cc, name, None)

        def call(request: bytes, context: grpc.ServicerContext) -> bytes:
            if function is None:
                context.abort(grpc.StatusCode.UNIMPLEMENTED,
                              f"{SERVICE}/{name} is not served: the ml-metadata wheel's store has no {name}")
            with self._lock:
                response, message, code = function(self._store, request)
            if code != 0:
                text = message.decode("utf-8", "replace") if isinstance(message, bytes) else str(message)
                context.abort(_STATUS.get(code, grpc.StatusCode.UNKNOWN), text)
            return response

        # No (de)serializers: the request and response stay bytes, parsed only by MLMD's C++ code.
        return grpc.unary_unary_rpc_method_handler(call)

    def service_handler(self) -> grpc.GenericRpcHandler:
        """The handler for all 52 RPCs of ``ml_metadata.MetadataStoreService``."""
        return grpc.method_handlers_generic_handler(SERVICE, {name: self._handler(name) for name in rpc_names()})


def serve(listen: str, config: metadata_store_pb2.ConnectionConfig, workers: int = 8) -> tuple[grpc.Server, int]:
    """Starts the gRPC server on ``listen`` (HOST:PORT; port 0 picks one) and returns it with the bound port.
    Raises RuntimeError if the address cannot be bound."""
    adapter = MetadataStoreAdapter(config)
    options = [("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
               ("grpc.max_send_message_length", MAX_MESSAGE_BYTES)]
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers), options=options)
    server.add_generic_rpc_handlers((adapter.service_handler(),))
    port = server.add_insecure_port(listen)
    if port == 0:
        raise RuntimeError(f"--listen {listen}: could not bind (address in use or not on this host)")
    server.start()
    return server, port


def main(argv: list[str] | None = None) -> int:
    """Command line: see the module's docstring."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--listen", default="127.0.0.1:8080", help="HOST:PORT to serve on (MLMD's port is 8080)")
    parser.add_argument("--sqlite", help="SQLite file of the store (:memory: for a throw-away one)")
    parser.add_argument("--mysql", help="HOST:PORT/DATABASE of a MySQL or MariaDB store")
    parser.add_argument("--mysql-user", default="root")
    args = parser.parse_args(argv)
    try:
        config = connection_config(args.sqlite, args.mysql, args.mysql_user,
                                   os.environ.get("MLMD_MYSQL_PASSWORD", ""))
        server, port = serve(args.listen, config)
    except (ValueError, RuntimeError) as error:
        print(f"mlmd_server: {error}", file=sys.stderr)
        return 2
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    host = args.listen.rpartition(":")[0]
    print(f"listening on {host}:{port} ({len(served_rpcs())} of {len(rpc_names())} RPCs served)", flush=True)
    stop.wait()
    server.stop(grace=2).wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
