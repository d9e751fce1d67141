"""The project's rooms: the top-level folders, each installed as ``shimkit.<folder>``.

Kept here alone, read by ``setup.py`` (which maps each folder onto the namespace), the layer test and the
audit cache's source digest; a new room is added here once.
"""

ROOMS = ("registry", "passes", "plugins", "audit", "csrc", "testing", "metal", "runtime", "objc")
