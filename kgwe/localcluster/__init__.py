"""A local Kubernetes cluster built from real components: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, kwok GPU nodes carrying the GPU Operator's labels, and small stand-ins for the GPU
Operator's node-side managers. `kgwe cluster up`, `kgwe demo`, the benchmarks and the tests run on it.
"""
