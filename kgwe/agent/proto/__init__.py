"""The kubelet APIs KGWE speaks over gRPC: .proto files here, their Python code generated at build time
(hack/protos.py)."""
