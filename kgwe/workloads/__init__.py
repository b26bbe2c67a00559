"""GPUWorkload operator: seed conversion, pure planning of child objects and status, and the reconciler."""
