"""`clustertwin energy` (per-stage clock plans and the time-energy frontier, Perseus) and
`clustertwin heat` (a node's thermal stragglers and power-cap rebalancing, Lit Silicon)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..cli_options import job_options
from ..jobs import JobOptions

CapOpt = typer.Option(None, "--power-cap", help='GPU power limit, e.g. "500W"')
ClockOpt = typer.Option(None, "--clock", help='locked SM clock, e.g. "1410MHz"')


def _fraction(text: str, field: str) -> float:
    from ..errors import SpecError
    t = text.strip()
    try:
        v = float(t[:-1]) / 100.0 if t.endswith("%") else float(t)
    except ValueError:
        raise SpecError(field, f"cannot read {text!r} as a fraction", 'e.g. 0.01 or "1%"') from None
    return v


def _check_plannable(gpu, power_cap: Optional[str], clock: Optional[str]) -> None:
    """The clock plan starts from the clock the cap or lock leaves; below the planner's lowest clock there
    is no plan to make (and no clock level to start from)."""
    from ..cost import power as pw
    from ..errors import SpecError
    from .perseus import LOWEST_CLOCK
    f = pw.clock(gpu, "tensor")
    if f < LOWEST_CLOCK:
        flag, what = ("clock", clock) if clock is not None else ("power-cap", power_cap)
        raise SpecError(flag, f"{what} leaves {gpu.name} at {f:.0%} of its reference clock, below the "
                        f"{LOWEST_CLOCK:.0%} the energy planner starts from", f"raise --{flag}")


def register(app: typer.Typer) -> None:
    @app.command()
    @job_options(profile=True)
    def energy(job: JobOptions, profile: Optional[Path], power_cap: Optional[str] = CapOpt,
               clock: Optional[str] = ClockOpt,
               max_slowdown: str = typer.Option("0.01", "--max-slowdown",
                                                help='step-time increase allowed, a fraction or "1%"'),
               as_json: bool = typer.Option(False, "--json", help="print JSON (schema 1)")) -> None:
        """Plan per-stage GPU clocks that cut a step's energy at no or bounded slowdown (Perseus, SOSP'24)
        and show the time-energy frontier."""
        from ..cli import _emit_json, console
        from ..jobs import job_from_options
        from ..predict import predict_job
        from ..report.console import energy_tables, print_all
        from .energy import job_with_power, parse_power_flags
        from .perseus import plan_energy
        fraction = _fraction(max_slowdown, "max-slowdown")
        tj = job_with_power(job_from_options(job), *parse_power_flags(power_cap, clock))
        _check_plannable(tj.cluster.gpu, power_cap, clock)
        pred = predict_job(tj, profile)
        plan = plan_energy(pred, fraction)
        if as_json:
            _emit_json(plan.to_json())
            return
        print_all(console, energy_tables(pred, plan))

    @app.command()
    @job_options()
    def heat(job: JobOptions,
             temps: str = typer.Option(..., "--temps", help="each GPU's temperature in a node, deg C: 55,60,...,75"),
             power_cap: Optional[str] = CapOpt,
             as_json: bool = typer.Option(False, "--json", help="print JSON (schema 1)")) -> None:
        """A node's thermal stragglers (Lit Silicon): each GPU's clock at its temperature under the cap,
        the step slowdown it costs, and the gain from moving cap to the stragglers at equal node power."""
        from ..cli import _emit_json, console
        from ..errors import SpecError
        from ..jobs import job_from_options
        from ..predict import predict_job
        from ..reliability.stragglers import step_slowdown_from_group
        from ..report.console import heat_tables, print_all
        from .energy import job_with_power, parse_power_flags
        from .heat import node_thermal
        if job.stragglers is not None:
            raise SpecError("--thermal-slowdown", "heat derives the node's thermal stragglers from --temps; "
                            "the fleet's straggler flags do not apply here",
                            "drop --no-stragglers, --straggler-cv and --thermal-slowdown")
        tj = job_with_power(job_from_options(job), *parse_power_flags(power_cap, None))
        try:
            ts = [float(x) for x in temps.split(",") if x.strip()]
        except ValueError:
            raise SpecError("temps", f"cannot read {temps!r}", "give degrees Celsius, comma-separated: 60,62,65") from None
        g = min(tj.cluster.gpus_per_node, tj.cluster.num_gpus)
        if len(ts) != g:
            raise SpecError("temps", f"{len(ts)} temperatures for {g} GPUs per node", f"give {g}, one per GPU")
        node = node_thermal(tj.cluster.gpu, ts)
        pred = predict_job(tj)
        lost = step_slowdown_from_group(pred, node.imbalance_slowdown)
        gain = step_slowdown_from_group(pred, node.rebalance_gain)
        if as_json:
            _emit_json({"schema": 1, **node.to_json(), "step_slowdown": lost, "step_gain_from_rebalancing": gain})
            return
        print_all(console, heat_tables(node, lost, gain))
