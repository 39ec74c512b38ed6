"""localcluster: a real Kubernetes cluster on this machine, without Docker; a developer's
tool (like bench/ and hack/), not part of the driver's wheel.

What it runs is built from source by hack/build-k8s.sh (etcd, kube-apiserver,
kube-scheduler, kube-controller-manager, kubelet, kubectl) and hack/build-node.sh
(containerd, runc, the pause program), as plain processes:

* controlplane.py: the control plane, the one way anything here starts one: on the
  host's 127.0.0.1 for Nodes without a kubelet (the e2e tier's stand-in nodes), or
  inside a node's network namespace for its real kubelet;
* node.py: a local node (`LocalNode`): that control plane, containerd, runc and a
  kubelet in namespaces of their own, with images assembled here (images.py), torn
  down without a trace (sweep.py);
* driver.py: the driver on such a node, run the way its DaemonSet would run it;
* demo.py: `make demo`, the node with the driver and deploy/'s examples, until Ctrl-C.

    python -m localcluster demo up   [--workdir /tmp/dra-demo]   (make demo)
    python -m localcluster demo down [--workdir /tmp/dra-demo]   (make demo-down)

The test tiers use it (tests/e2e, tests/node: their fixtures start it) and so does
`make bench`; it never imports from tests/ (tests/unit/test_localcluster_layout.py).
"""
