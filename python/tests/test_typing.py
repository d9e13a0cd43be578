"""The package's types: the stub (python/stoker/__init__.pyi) against the built module
(mypy's stubtest), its `Loader(...)` overloads against the module's signature and the
Rust defaults (which stubtest cannot see: the constructor shows itself as `*args,
**kwargs`), `mypy --strict` over the examples and a program that uses the API as a
user would (python/tests/typed_usage.py), and that program run for real.

mypy comes from scripts/py-venv.sh; without it the mypy tests skip, saying so, except
under CI, where a missing mypy is a broken venv."""

import ast
import inspect
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import stoker

PY = Path(__file__).resolve().parents[1]
STUB = PY / "stoker" / "__init__.pyi"
CONFIG = PY / "mypy.ini"
ALLOWLIST = PY / "tests" / "stubtest-allowlist.txt"
TYPED_USAGE = PY / "tests" / "typed_usage.py"
REFERENCE = PY.parent / "docs" / "python.md"

# The arguments whose type decides the batch type: an overload of Loader(...) gives
# them without a default.
DISCRIMINATORS = {"map", "mixup"}

# The most parameters Loader(...) may have: the 25 (the last four device,
# dtype, layout, normalize).
MAX_PARAMETERS = 25


def need_mypy():
    try:
        import mypy  # noqa: F401
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("mypy is not installed: scripts/py-venv.sh installs it")
        pytest.skip("SKIPPED: mypy is not installed (scripts/py-venv.sh installs it)")


def run(args, cwd):
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=cwd, capture_output=True, text=True, timeout=600
    )


def test_mypy_strict_passes_on_the_examples_and_a_typed_program(tmp_path):
    need_mypy()
    # The config points mypy at this checkout's stub, and lets torch be absent.
    out = run(
        [
            "mypy",
            "--strict",
            "--config-file",
            str(CONFIG),
            "--cache-dir",
            str(tmp_path / "cache"),
            str(PY / "examples"),
            str(TYPED_USAGE),
        ],
        cwd=PY.parent,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_stub_matches_the_module(tmp_path):
    need_mypy()
    allow = tmp_path / "allowlist.txt"
    lines = ALLOWLIST.read_text().splitlines() if ALLOWLIST.exists() else []
    if not hasattr(stoker, "decoder"):
        # A module built before decoder() was added: the stub is ahead of it, not wrong.
        warnings.warn(f"stoker at {stoker.__file__} has no decoder(): rebuild it to check that")
        lines += ["stoker.decoder", "stoker.__all__"]
    allow.write_text("\n".join(lines) + "\n")
    # Run outside the checkout, so that `import stoker` is the built module; the
    # config's mypy_path makes the stub this checkout's. stubtest compares
    # python/stoker/_map.py with the module's too: a build older than the checkout
    # fails here.
    out = run(
        [
            "mypy.stubtest",
            "stoker",
            "--mypy-config-file",
            str(CONFIG),
            "--allowlist",
            str(allow),
        ],
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def stub_overloads():
    """(name, keyword-only, default or `inspect.Parameter.empty`) of each parameter of
    each `Loader.__new__` overload in the stub, `cls` left out."""
    tree = ast.parse(STUB.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Loader")
    overloads = []
    for f in cls.body:
        if not (isinstance(f, ast.FunctionDef) and f.name == "__new__"):
            continue
        a = f.args
        pos = a.posonlyargs + a.args
        defaults = [inspect.Parameter.empty] * (len(pos) - len(a.defaults)) + [
            ast.literal_eval(d) for d in a.defaults
        ]
        params = [(p.arg, False, d) for p, d in zip(pos, defaults)][1:]
        params += [
            (p.arg, True, inspect.Parameter.empty if d is None else ast.literal_eval(d))
            for p, d in zip(a.kwonlyargs, a.kw_defaults)
        ]
        overloads.append(params)
    return overloads


def rust_defaults():
    """The defaults of the `loader_args! { ... }` list in python/src/loader_args.rs
    (Loader's parameters, `name: type = default`), as Python values."""
    src = (PY / "src" / "loader_args.rs").read_text()
    block = re.search(r"^loader_args! \{\n(.*?)^\}", src, re.S | re.M)
    assert block, "no loader_args! { ... } in python/src/loader_args.rs"
    words = {"None": None, "true": True, "false": False}
    out = {}
    keyword_only = False
    for line in block.group(1).splitlines():
        line = line.strip()
        if not line or line.startswith("//"):
            continue
        if line == "*":
            keyword_only = True
            continue
        required = re.fullmatch(r"(\w+): [^=]+;", line)
        if required:
            out[required.group(1)] = (inspect.Parameter.empty, False)
            continue
        name, expr = re.fullmatch(r"(\w+): [^=]+ = (.+)[,;]", line).groups()
        expr = expr.removesuffix(".into()")
        # A wrapped default, e.g. `Float(0.0)`, `WorkersArg::Count(Count(2))`: the
        # literal inside.
        while m := re.fullmatch(r"[\w:]+\((.+)\)", expr):
            expr = m.group(1)
        number = re.fullmatch(r"-?\d+", expr)
        if number:
            value = int(expr)
        elif expr in words:
            value = words[expr]
        else:
            # A str or float literal reads the same in both languages.
            value = ast.literal_eval(expr)
        out[name] = (value, keyword_only)
    return out


def test_the_stub_has_every_loader_argument_with_its_default():
    """One signature in four places: the binder's list (loader_args.rs), the text
    signature the module shows (inspect.signature), the stub's overloads, and (below)
    the docstring and docs/python.md."""
    runtime = inspect.signature(stoker.Loader).parameters
    rust = rust_defaults()
    assert list(rust) == list(runtime), "python/src/loader.rs and the built module differ"
    assert len(runtime) <= MAX_PARAMETERS, f"Loader has {len(runtime)} parameters"
    for name, (default, kw_only) in rust.items():
        shown = runtime[name]
        assert kw_only == (shown.kind is inspect.Parameter.KEYWORD_ONLY), name
        assert default == shown.default, f"{name}: {default!r} in loader_args.rs, {shown.default!r} shown"
    overloads = stub_overloads()
    assert len(overloads) >= 2
    plain = overloads[0]
    # The first overload is the call as the module takes it: every argument, by
    # position or keyword as the module takes it, with its default.
    assert [p[0] for p in plain] == list(runtime)
    for name, kw_only, default in plain:
        assert kw_only == rust[name][1], f"{name}: keyword-only in one of the stub and the module"
        assert default == rust[name][0], f"{name}: the stub's default {default!r}, not {rust[name][0]!r}"
    # The others narrow the batch type by map/mixup, and change nothing else.
    for params in overloads[1:]:
        assert [p[0] for p in params] == list(runtime)
        for name, _, default in params:
            if default is inspect.Parameter.empty:
                assert name in DISCRIMINATORS | {"data"}, f"{name} has no default"
            else:
                assert default == rust[name][0], f"{name}: default {default!r} in an overload"


def documented(text):
    """The names of a parameter list: `- name=default: ...` or `- name: ...` bullets
    (the stub's docstring), or the first column of a Markdown table (`| `name` |`)."""
    return re.findall(r"^\s*- (\w+)[=:]", text, re.M) + re.findall(r"^\| `(\w+)` \|", text, re.M)


def test_every_loader_argument_is_documented_and_nothing_else():
    doc = ast.get_docstring(
        next(
            n
            for n in ast.parse(STUB.read_text()).body
            if isinstance(n, ast.ClassDef) and n.name == "Loader"
        )
    )
    names = list(inspect.signature(stoker.Loader).parameters)
    assert documented(doc) == names, "the stub's Loader docstring lists other parameters"
    text = REFERENCE.read_text()
    assert "## API reference" in text
    reference = text.split("## API reference", 1)[1]
    table = reference.split("### `stoker.Loader(", 1)[1].split("\n### ", 1)[0]
    assert documented(table) == names, "docs/python.md's Loader table lists other parameters"


def test_the_package_says_it_is_typed():
    # PEP 561: without the marker a checker ignores the stub of an installed package.
    assert (PY / "stoker" / "py.typed").is_file()


def test_the_typed_program_runs(tmp_path):
    out = subprocess.run(
        [sys.executable, str(TYPED_USAGE), str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_example_type_checks_with_an_untyped_torchvision_installed(tmp_path):
    """torchvision ships no py.typed: installed, `mypy --strict` reports its imports
    unless the example marks them, and a user's own config has no section that
    ignores it. (torch itself cannot be installed here; with it, the example's
    `from_dlpack` and `backward` are what mypy would check: docs/python.md.)"""
    need_mypy()
    site = tmp_path / "site" / "torchvision"
    site.mkdir(parents=True)
    for name in ("__init__", "transforms", "datasets"):
        (site / f"{name}.py").write_text("def anything(*args, **kwargs):\n    pass\n")
    # This checkout's config without its torchvision line (torch stays absent, and
    # ignored), its stub path made absolute.
    config = CONFIG.read_text().replace("$MYPY_CONFIG_FILE_DIR", str(PY))
    config = config.replace(
        "[mypy-torch,torch.*,torchvision,torchvision.*]", "[mypy-torch,torch.*]"
    )
    assert "torchvision" not in config.split("[mypy-torch,torch.*]")[1]
    (tmp_path / "mypy.ini").write_text(config)
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--config-file", str(tmp_path / "mypy.ini"),
         "--cache-dir", str(tmp_path / "cache"), str(PY / "examples")],
        cwd=PY.parent, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": str(tmp_path / "site")},
    )
    assert out.returncode == 0, out.stdout + out.stderr
