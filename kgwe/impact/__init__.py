"""PR impact: the recorded GPU demand and its replay through the policy of a revision."""
