"""Node GPU topology: the model, the known real matrices, the node annotation, GPU-set choice, NVML discovery.

Import the submodules directly (`from kgwe.topology import known, annotation, choice`); this package
imports nothing heavy so the extender's hot path stays light.
"""
