"""``tokenmill``: one command with subcommands. Thin: parses flags, calls the packages, prints.

Every bad input ends as one line on stderr naming the flag and what is allowed, with exit code 2.
"""

from __future__ import annotations

import atexit
import gc
import sys

import typer

from tokenmill.errors import TokenmillError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    help="Plan, simulate and serve hybrid Mixture-of-Experts language models.",
)


def _register() -> None:
    from tokenmill.cli import bench_cmd, catalog_cmd, plan_cmd
    from tokenmill.cli import sim_cmd as sim_cmd

    app.command("plan")(plan_cmd.plan)
    app.command("simulate")(sim_cmd.simulate)
    app.command("sweep")(sim_cmd.sweep)
    app.command("models")(catalog_cmd.models)
    app.command("gpus")(catalog_cmd.gpus)

    from tokenmill.cli import calibrate_cmd, calibrate_record_cmd, calibrate_row_cmd, local_cmd, predict_cmd

    app.command("predict")(predict_cmd.predict)
    calibrate_cmd.calibrate_app.command("row")(calibrate_row_cmd.row)
    calibrate_cmd.calibrate_app.command("record")(calibrate_record_cmd.record)
    calibrate_cmd.calibrate_app.command("local")(local_cmd.local)
    app.add_typer(calibrate_cmd.calibrate_app, name="calibrate")
    app.command("bench")(bench_cmd.bench)

    from tokenmill.cli import runtime_cmd

    app.command("generate")(runtime_cmd.generate)
    app.command("serve")(runtime_cmd.serve)


_register()


def _skip_exit_collection() -> None:
    """The interpreter's last cyclic collection at exit scans every object still alive, ~20 ms
    after a replay (docs/perf.md §7) to free memory the process is about to give back: move them
    to the permanent generation, which that collection skips."""
    gc.freeze()


def _one_line(text: str) -> str:
    return " ".join(text.split())


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app and turn every input error into one line and exit code 2."""
    if argv is None:  # the ``tokenmill`` program, not an in-process caller (tests pass argv)
        atexit.register(_skip_exit_collection)
    command = typer.main.get_command(app)
    try:
        result = command.main(args=argv, prog_name="tokenmill", standalone_mode=False)
    except TokenmillError as exc:
        print(f"error: {_one_line(str(exc))}", file=sys.stderr)
        sys.exit(2)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.TyperException as exc:  # usage errors: unknown option, bad value, missing argument
        print(f"error: {_one_line(exc.format_message())}", file=sys.stderr)
        sys.exit(exc.exit_code or 2)
    except typer.Abort:
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)
    except OSError as exc:  # a file the command could not read or write, after its own checks
        where = f"{str(exc.filename)[:120]}: " if exc.filename else ""
        print(f"error: {where}{_one_line(exc.strerror or str(exc))}", file=sys.stderr)
        sys.exit(2)
    if isinstance(result, int) and result:
        sys.exit(result)
