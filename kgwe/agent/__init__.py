"""The node agent: NVML discovery, kubelet PodResources, Node annotation/labels (`kgwe agent`)."""
