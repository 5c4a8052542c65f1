"""The Typer app, its consoles, and the one place where errors become exit codes.

Commands raise :class:`sweeps.common.errors.SweepsError` (or let KeyboardInterrupt through); the
group below prints one line and exits 2 for bad input, 1 for failures at run time, 130 on
Ctrl-C.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.console import Console, ConsoleDimensions
from typer.core import TyperGroup

from sweeps.common.errors import SweepsError, one_line
from sweeps.common.quietlogs import quiet


class _Console(Console):
    """A terminal gets rich's layout at its width; a pipe or file gets every line whole, never
    wrapped or cut (people grep logs)."""

    @property
    def size(self) -> ConsoleDimensions:
        if self.is_terminal:
            return super().size
        return ConsoleDimensions(PIPE_WIDTH, 25)

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        Console.size.fset(self, new_size)  # type: ignore[attr-defined]


PIPE_WIDTH = 100_000
out = _Console()
err = _Console(stderr=True)


def print_error(e: BaseException) -> None:
    from rich.markup import escape

    msg = one_line(e, 2000) or type(e).__name__
    # Escaped: a message quoting `pip install -e '/src/sweeps[aiplatform]'` is text, not markup.
    err.print(f"[bold red]error:[/] {escape(msg)}", highlight=False, soft_wrap=True)


def _no_flag_types(params: list[Any]) -> None:
    """A flag takes no value: its help row shows no `<bool>` placeholder, as in Click's own
    help (Typer labels every option with its type)."""
    for p in params:
        if getattr(p, "is_flag", False) and p.metavar is None:
            p.metavar = ""


class _Group(TyperGroup):
    """Every command runs inside this handler: the commands themselves never catch errors."""

    def get_params(self, ctx: Any) -> list[Any]:
        params = super().get_params(ctx)
        _no_flag_types(params)
        return params

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        cmd = super().get_command(ctx, cmd_name)
        if cmd is not None:
            _no_flag_types(cmd.get_params(ctx))
        return cmd

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except SweepsError as e:
            print_error(e)
            raise typer.Exit(e.exit_code) from None
        except KeyboardInterrupt:
            err.print("interrupted")
            raise typer.Exit(130) from None


app = typer.Typer(
    cls=_Group,
    add_completion=False,
    no_args_is_help=True,
    help="Hyperparameter sweeps for PyTorch: Optuna drives, Ray Train runs, MLflow remembers.",
    pretty_exceptions_enable=False,
)


# Set by `sweeps.cli.main`: this process is the `sweeps` command itself, not a CliRunner in a
# test or a notebook, so ending it at once cannot end anyone else's work.
STANDALONE: list[bool] = []


def exit_after_sweep(code: int) -> None:
    """End the `sweeps run`/`resume` process as soon as the sweep is recorded and printed.

    Everything the user asked for is on disk by now (the stores are flushed and closed by
    `api.run`). What the interpreter would still do is join Ray's threads and run its exit
    hooks, seconds nobody waits for. Of those, only the local cluster's teardown matters (its
    agents outlive the raylet otherwise), so that is done here, once the output is out; a
    service's cluster only loses a client. Inside a test or notebook (no STANDALONE), a normal
    exit.
    """
    if not STANDALONE:
        if code:
            raise typer.Exit(code)
        return
    import os
    import sys

    from sweeps.execution.cluster import stop_own_cluster

    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass  # a closed pipe: nothing more to say on it
    stop_own_cluster()  # a local Ray it started: its agents would outlive it by ~100 s
    os._exit(code)


def load_noting(path: Path, overrides: list[str], name: str | None) -> Any:
    """Load a spec with --set overrides; a sampler or pruner switched by --set loses the
    options it does not take, with one note per option on stderr."""
    from sweeps.search.samplers import adapt_options
    from sweeps.spec import load_spec

    s, notes = adapt_options(load_spec(path, overrides, name=name), overrides)
    for note in notes:
        err.print(note, highlight=False, soft_wrap=True)
    return s


def fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        text = f"{v:.4g}"
        if "e-" in text:  # 8e-06 next to 0.000249 reads as another unit: no exponents
            exponent = int(text.split("e-")[1])
            text = f"{float(text):.{exponent + 3}f}".rstrip("0").rstrip(".")
        elif "e+" in text:  # 12346 s, not 1.235e+04 s
            text = f"{v:.0f}"
        return text
    return str(v)


def _print_version(value: bool) -> None:
    if not value:
        return
    from importlib.metadata import PackageNotFoundError, version

    parts = []
    for dist in ("optuna", "ray", "mlflow", "torch"):
        try:
            parts.append(f"{dist} {version(dist)}")
        except PackageNotFoundError:
            parts.append(f"{dist} not installed")
    out.print(f"sweeps {version('sweeps')} ({', '.join(parts)})", highlight=False)
    raise typer.Exit(0)


@app.callback()
def _options(
    verbose: bool = typer.Option(False, "-v", "--verbose", help="Show our libraries' output."),
    _version: bool = typer.Option(
        False,
        "--version",
        callback=_print_version,
        is_eager=True,
        help="Print the versions of sweeps and of the libraries it runs on.",
    ),
) -> None:
    quiet(verbose)


IMAGE = typer.Option(
    None, "--image", help="resources.image: the trials' workers run in this container image."
)
ALLOW_PARTIAL = typer.Option(
    False,
    "--allow-partial",
    help="Under a quota (conf/teams.yaml): run until the quota is reached, where the sweep's "
    "worst case may not fit what is left.",
)


def cli_overrides(
    set_: list[str], trials: int | None, parallel: int | None, image: str | None
) -> list[str]:
    """`--set` plus the shorthand flags of run and submit, as `key.path=value` overrides."""
    overrides = list(set_)
    for key, value in (
        ("budget.trials", trials),
        ("budget.parallel", parallel),
        ("resources.image", image),
    ):
        if value is not None:
            overrides.append(f"{key}={value}")
    return overrides
