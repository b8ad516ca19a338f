// The node's two tiny images' programs (standard library only), built static by ../build.sh:
//   pause: the pod sandbox's process (containerd's pinned sandbox image, imported, never pulled);
//   probe: the e2e smoke tests' program (tests/test_e2e_node.py).
module tfk8s.local/node/images

go 1.26.0
