"""Where the installed ``kinstkit`` finds each folder of the checkout.

The source tree keeps its layout (``generator/``, ``vm/``, ``templates/``,
``sys/modules/``, ``samples/``); the distribution maps it under one
top-level name, so that installing kinstkit claims no generic ``generator``
or ``vm`` in site-packages.  ``generator/common/paths.py`` finds the data
beside the code in a checkout, and in ``kinstkit/data/`` installed.
"""

from pathlib import Path

from setuptools import find_namespace_packages, find_packages, setup

CODE = {"kinstkit": "generator", "kinstkit.vm": "vm"}
DATA = {"kinstkit.data.templates": "templates", "kinstkit.data.sys": "sys", "kinstkit.data.samples": "samples"}

# What the package reads at run time besides its Python, wherever it lies below generator/: the C it compiles
# (accelerators and their included tables, the harness, the QEMU plugin) and the facts it loads as data (an
# ISA's kinds.txt).  Found, not listed, so a new folder of them cannot be left out of the wheel.
CODE_C = sorted({str(p.parent.relative_to("generator") / f"*{p.suffix}") for p in Path("generator").rglob("*")
                 if p.suffix in (".c", ".h", ".S", ".inc", ".txt") and p.is_file()})

packages = [name for top, folder in CODE.items()
            for name in (top, *(f"{top}.{sub}" for sub in find_packages(folder)))]
packages += [name for top, folder in DATA.items()
             for name in (top, *(f"{top}.{sub}" for sub in find_namespace_packages(folder)))]

setup(
    packages=packages,
    package_dir={**CODE, **DATA},
    package_data={
        "kinstkit": CODE_C,
        "kinstkit.vm": ["guest/*", "guest/**/*"],
        **{name: ["*"] for name in packages if name.startswith("kinstkit.data")},
    },
    # The generated sources a checkout may hold in sys/modules/ are not kinstkit's to ship.
    exclude_package_data={name: ["*.o", "*.ko"] for name in packages if name.startswith("kinstkit.data")},
)
