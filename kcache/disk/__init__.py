"""The file system under a cache root: descriptor-safe reads and atomic publish (fsio), where a
root's folders are (paths), how entries, locks, stats and quarantine are laid out (layout), and
the per-key and global locks (locks). Imports nothing above kcache.keys (docs/design.md)."""
