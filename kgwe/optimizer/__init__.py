"""The workload optimizer: small models learned from what KGWE already records (metering, the demand record,
the cost store), each beside today's rule and used only where it beat that rule on data it was not fitted on
(docs/optimizer.md).

Shape: a pure core (features, models, evaluation on plain data: `prediction`, `record`, `scores`, one module
per model) with the training data read at the edges (`store`, the fitters of `registry`), refitted inside the
controller on its own schedule (`service`), and `kgwe optimize report` (`optimize_cmd`).
"""
