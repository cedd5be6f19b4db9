"""Fingerprint one kernel in a fresh process; prints one JSON line (see key_in_subprocess)."""

import json
import sys

job = json.loads(sys.argv[1])
sys.path.insert(0, job["path"])

import importlib  # noqa: E402

import kcache  # noqa: E402
from kcache.dispatcher.components import kernel_components  # noqa: E402
from kcache.dispatcher.frontends.numba_cuda.bridge import FRONTEND  # noqa: E402

module = importlib.import_module(job["module"])
kernel = getattr(module, job["kernel"])
components = kernel_components(
    kernel,
    frontend=FRONTEND,
    signature=job.get("signature", "(array(float32, 1d, C), array(float32, 1d, C))"),
    cc=tuple(job.get("cc", (9, 0))),
    targetoptions=kernel.targetoptions,
    toolchain=job.get("toolchain"),  # None: this process's (as kernel_components defaults)
    config=job.get("config"),
)
print(json.dumps({
    "key": kcache.make_key(components),
    "components": components,
    "compiled": len(kernel.overloads),
}))
