"""``shimkit audit``'s exit statuses (docs/audit.md, "Exit status"), importable without torch."""

EXIT_CLEAN = 0
# Findings in a model: a missing kernel or runtime function, wrong numbers, an op that stops at to_edge or export.
EXIT_FINDINGS = 1
EXIT_INCOMPLETE = 2  # the audit could not run (a model, or the whole run): nothing is vouched for
EXIT_INTERRUPTED = 130  # the shell's convention for SIGINT
