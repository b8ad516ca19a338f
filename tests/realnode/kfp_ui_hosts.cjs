// Loaded into KFP's UI server (node --require) when it runs on the host rather than in a pod: resolves the
// in-cluster names of $TFK8S_UI_HOSTS ({"seaweedfs.kubeflow": "<the Service's ClusterIP>"}) as the cluster's DNS
// would for a pod. The UI reads an artifact at the endpoint its provider info names (seaweedfs.kubeflow:9000),
// with the credentials of the Secret it names, as KFP's ml-pipeline-ui pod does.
const dns = require('dns');
const hosts = JSON.parse(process.env.TFK8S_UI_HOSTS || '{}');
const lookup = dns.lookup;
dns.lookup = function (host, options, callback) {
  if (typeof options === 'function') { callback = options; options = {}; }
  const address = hosts[host];
  if (address === undefined) return lookup.call(this, host, options, callback);
  if (options && options.all) return process.nextTick(callback, null, [{ address, family: 4 }]);
  return process.nextTick(callback, null, address, 4);
};
