"""The registry of loss names: light to import, every option range-checked, one list of names."""

import ast
import inspect
import math
import subprocess
import sys
from pathlib import Path

import pytest

from vlm_smmd.losses import registry
from vlm_smmd.losses.registry import (
    AUX_LAMBDA,
    AUX_NAMES,
    LOSSES,
    SETTINGS,
    build_loss,
    check_options,
    loss_class,
    options_from_settings,
)

PACKAGE = Path(__file__).resolve().parents[2] / "vlm_smmd"
NAMES = ("smmd", "mmd", "smooth", "ntl_mse", "ntl_was", "dist2", "gce", "ntil", "number_level", "none")


def _imported_after(code: str) -> list[str]:
    """Which of torch / transformers are in sys.modules after running `code` in a fresh interpreter."""
    probe = f"{code}\nimport sys\nprint(','.join(m for m in ('torch', 'transformers') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return [m for m in out.stdout.strip().split(",") if m]


def test_the_registry_and_the_package_import_without_torch():
    assert _imported_after("from vlm_smmd.losses.registry import AUX_NAMES, check_options") == []
    code = "from vlm_smmd.losses import AUX_NAMES, LOSSES, check_options\ncheck_options('smmd', {'squash': 4.0})"
    assert _imported_after(code) == []


@pytest.mark.slow
def test_the_core_imports_without_transformers():
    code = ("from vlm_smmd.losses import numeric_loss_func, NumericLossMixin, NTILLoss, NumericObjective\n"
            "from vlm_smmd.numeric import NumericVocab")
    assert _imported_after(code) == ["torch"]


def test_names():
    assert AUX_NAMES == NAMES == tuple(LOSSES)
    import vlm_smmd.losses

    assert vlm_smmd.losses.AUX_NAMES is AUX_NAMES


@pytest.mark.parametrize("name", NAMES)
def test_every_option_default_is_the_class_default_and_passes_its_own_check(name):
    from vlm_smmd.losses import NumericLoss

    spec = LOSSES[name]
    defaults = {o.name: o.default for o in spec.options}
    assert check_options(name, defaults).keys() == defaults.keys()
    cls = loss_class(name)
    if cls is None:
        assert spec.options == () and build_loss(name, [0.0, 1.0]) is None
        return
    assert issubclass(cls, NumericLoss)
    signature = inspect.signature(cls.__init__).parameters
    for option in spec.options:  # the registry describes the class as it is
        assert option.name in signature, (name, option.name)
        default = signature[option.name].default
        assert (tuple(default) if isinstance(default, (list, tuple)) else default) == option.default
        assert option.help and option.rule
    assert all(key in signature for key in spec.fixed)
    loss = build_loss(name, [0.0, 1.0, 2.0])
    assert isinstance(loss, cls) and len(loss) == 3


def test_a_setting_shared_by_several_losses_means_the_same_everywhere():
    seen = {}
    for spec in LOSSES.values():
        for option in spec.options:
            assert seen.setdefault(option.setting, option) == option, option.setting
    assert seen == SETTINGS and LOSSES["smmd"].option("seed").setting == "kernel_seed"


def test_options_from_flat_settings():
    """A config holds one key per setting; each loss reads its own and ignores the others."""
    config = {"kernel": "laplace", "kernel_seed": 3, "tau": 2.0, "sigma": 0.5, "ntil_temperature": 0.2, "lr": 1}
    assert options_from_settings("mmd", config) == {"kernel": "laplace", "seed": 3}
    assert options_from_settings("dist2", config) == {"tau": 2.0}
    assert options_from_settings("ntil", config) == {"temperature": 0.2}
    assert options_from_settings("ntl_was", config) == {} == options_from_settings("none", config)
    with pytest.raises(ValueError, match="option tau=0"):
        options_from_settings("dist2", {"tau": 0})


BAD = [
    ("smmd", "squash", 0, "squash=0"), ("smmd", "squash", 0.5, "squash=0.5"), ("smmd", "squash", -3.0, "squash=-3"),
    ("smmd", "squash", math.nan, "squash=nan"), ("smmd", "squash", math.inf, "squash=inf"),
    ("smmd", "sigmas", (), "sigmas=()"), ("smmd", "sigmas", [2.0, -1.0], r"sigmas=\[2.0, -1.0\]"),
    ("smmd", "sigmas", [0.0], r"sigmas=\[0.0\]"), ("mmd", "sigmas", [math.nan], r"sigmas=\[nan\]"),
    ("smmd", "sigmas", "2.0", "sigmas='2.0'"), ("smooth", "alpha", -0.1, "alpha=-0.1"),
    ("smmd", "alpha", "0.5", "alpha='0.5'"), ("smmd", "alpha", math.nan, "alpha=nan"),
    ("smmd", "kernel", "cosine", "kernel='cosine'"), ("smmd", "kernel_mode", "learned", "kernel_mode='learned'"),
    ("smmd", "seed", 1.5, "seed=1.5"), ("smmd", "seed", True, "seed=True"),
    ("dist2", "tau", 0.0, "tau=0.0"), ("dist2", "tau", math.inf, "tau=inf"), ("gce", "sigma", -1, "sigma=-1"),
    ("ntil", "digit_exp", 0.0, "digit_exp=0.0"), ("ntil", "abs_alpha", -1.0, "abs_alpha=-1.0"),
    ("ntil", "temperature", math.nan, "temperature=nan"), ("ntil", "mag_alpha", True, "mag_alpha=True"),
]


@pytest.mark.parametrize("name, option, value, shown", BAD)
def test_out_of_range_options_are_one_line_errors_naming_option_and_value(name, option, value, shown):
    with pytest.raises(ValueError, match=shown) as err:
        check_options(name, {option: value})
    message = str(err.value)
    assert "\n" not in message and "must be" in message and repr(name) in message


def test_unknown_and_fixed_options():
    with pytest.raises(ValueError, match=r"aux 'ntl_mse' takes no option 'sigmas' \(its options: none\)"):
        check_options("ntl_mse", {"sigmas": (2.0,)})
    with pytest.raises(ValueError, match="its options: tau"):
        check_options("dist2", {"sigma": 1.0})
    with pytest.raises(ValueError, match="fixes mode='mmd'"):
        check_options("mmd", {"mode": "smmd"})
    with pytest.raises(ValueError, match="aux must be one of"):
        check_options("focal", {})


def test_accepted_values_come_back_as_the_loss_takes_them():
    got = check_options("smmd", {"sigmas": [1, 2.5], "squash": 1, "alpha": 0, "seed": 7})
    assert got == {"sigmas": (1.0, 2.5), "squash": 1.0, "alpha": 0.0, "seed": 7}
    assert check_options("smmd", {"alpha": "auto"}) == {"alpha": "auto"}
    assert AUX_LAMBDA.check(0) == 0.0
    for bad in (-0.5, math.nan, math.inf, "1"):
        with pytest.raises(ValueError, match="aux_lambda="):
            AUX_LAMBDA.check(bad)


def test_squash_one_is_no_rescaling():
    """squash accepts 1 (the raw distances) or more; the kernel at squash 1 is that of the raw distances."""
    import torch

    from vlm_smmd.losses.kernels import distance_kernel, value_distances

    values = [0.0, 1.0, 5.0, 40.0]
    loss = build_loss("smmd", values, squash=1.0)
    torch.testing.assert_close(loss.K.double(), distance_kernel(value_distances(torch.tensor(values))),
                               rtol=1e-6, atol=1e-7)
    assert not torch.allclose(build_loss("smmd", values, squash=9.0).K, loss.K)


# SMMDLoss's own `mode` choices (its public signature), which the registry's smmd / mmd / smooth entries fix
ALLOWED = {("vlm_smmd/losses/smmd.py", "MODES")}


def _name_lists(tree: ast.AST, path: str = ""):
    """Tuple / list / set literals and dict keys holding two or more registered loss names."""
    allowed = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Assign)
               and any(isinstance(t, ast.Name) and (path, t.id) in ALLOWED for t in node.targets)}
    for node in ast.walk(tree):
        if id(node) in allowed:
            continue
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            items = node.elts
        elif isinstance(node, ast.Dict):
            items = [k for k in node.keys if k is not None]
        else:
            continue
        names = [e.value for e in items if isinstance(e, ast.Constant) and e.value in LOSSES]
        if len(names) >= 2:
            yield node.lineno, names


def test_no_other_hand_written_list_of_loss_names_in_the_package():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == Path(registry.__file__).resolve():
            continue
        relative = path.relative_to(PACKAGE.parent).as_posix()
        for line, names in _name_lists(ast.parse(path.read_text(), str(path)), relative):
            found.append(f"{relative}:{line} {names}")
    assert found == [], "loss names written outside vlm_smmd/losses/registry.py:\n" + "\n".join(found)


def test_the_list_finder_sees_a_list():
    """The check above would catch a copied list (it can fail)."""
    tree = ast.parse('AUX = ("smmd", "mmd", "none")\nKEEP = {"gce": 1, "dist2": 2}\nOK = ("mean", "none")')
    assert [names for _, names in _name_lists(tree)] == [["smmd", "mmd", "none"], ["gce", "dist2"]]
