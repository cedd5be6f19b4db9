"""The numba-cuda bridge: every numba-cuda internal kcache uses, by concern (supported:
numba-cuda >= 0.26, < 0.31; docs/compat.md). ``bridge.FRONTEND`` implements
:class:`kcache.dispatcher.frontends.base.Frontend`; ``support`` decides whether the installed
numba-cuda is supported before any other module here is imported."""
