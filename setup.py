"""The compiled parts: the route-query fast path's hot loop (src/pynamesrv/namesrv/_fastpath.c)
and the registration decode's per-topic loops (src/pynamesrv/namesrv/_routed.c).

Optional: where no C compiler or Python headers are present the build skips them with a
warning and pynamesrv runs the same code in pure Python (namesrv/fastpath.py, namesrv/model.py).
Everything else about the package is in pyproject.toml.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "pynamesrv.namesrv._fastpath",
            ["src/pynamesrv/namesrv/_fastpath.c"],
            optional=True,
            extra_compile_args=["-O2"],
        ),
        Extension(
            "pynamesrv.namesrv._routed",
            ["src/pynamesrv/namesrv/_routed.c"],
            optional=True,
            extra_compile_args=["-O2"],
        ),
    ]
)
