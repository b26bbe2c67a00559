"""Git edges of KGWE: the policy source (clone/fetch/export/poll/webhook) and commit-back of reports."""
