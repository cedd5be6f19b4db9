"""Where entry bytes come from: the protocol every tier keeps (tier), the local cache roots
(local), remote servers (remote/) and bundles (bundle/). Tiers move bytes; the store
(kcache.store) decides what is trusted (docs/design.md)."""
