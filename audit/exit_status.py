"""``shimkit audit``'s exit statuses (docs/audit.md, "Exit status"), importable without torch."""

EXIT_CLEAN = 0
EXIT_MISSING = 1
EXIT_INCOMPLETE = 2
EXIT_INTERRUPTED = 130  # the shell's convention for SIGINT
