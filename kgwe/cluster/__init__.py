"""All Kubernetes I/O of KGWE: server-side apply and prune, Events, the leader Lease, node operations
(label, cordon, evict) and reading the GPU inventory. Thin on purpose: decisions live in pure modules."""
