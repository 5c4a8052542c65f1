"""Billing rules of tracking/costs.py on hand-computed cases (issue 17, items 8, 9, 10)."""

from __future__ import annotations

import json
import math

import pytest
from conftest import make_spec
from typer.testing import CliRunner

from sweeps.common.errors import SpecError
from tracking.costs import (
    Machine,
    check_spec_prices,
    machine,
    machines,
    machines_billed,
    spec_cost_facts,
    trial_cost,
    worker_share,
)

A2_8G = Machine("a2-highgpu-8g", 96, 680, 29.387, "nvidia-a100-40gb", 8, spot_price_per_hour=11.5)
A2_1G = Machine("a2-highgpu-1g", 12, 85, 3.673, "nvidia-a100-40gb", 1)
N1_8 = Machine("n1-standard-8", 8, 30, 0.38)
HOUR = 3600.0


def test_shipped_table_has_cpu_and_gpu_machines():
    table = machines()
    assert table["local"].price_per_hour == 0
    assert any(m.gpu_count for m in table.values())
    assert machine("e2-standard-2").price_per_hour > 0


def test_unknown_machine_is_named():
    with pytest.raises(KeyError, match="resources.machine_type: unknown machine 'z9'"):
        machine("z9")


# ----- item 8: a worker pays the share of a machine it reserves ---------------------------------


def test_eight_one_gpu_workers_on_an_8_gpu_machine_pay_one_machine():
    # The case: 8 × its $29.387 list price ($235.10/h) before.
    cost, gpuh = trial_cost(machine("a2-highgpu-8g"), workers=8, gpus_per_worker=1, seconds=HOUR)
    assert cost == pytest.approx(29.387)
    assert gpuh == pytest.approx(8.0)


def test_a_quarter_gpu_costs_a_quarter_of_one_gpu_on_either_a100_type():
    # Before: $7.35/h on a2-highgpu-8g, twice a whole a2-highgpu-1g.
    on_8g, gpuh = trial_cost(A2_8G, workers=1, gpus_per_worker=0.25, seconds=HOUR)
    on_1g, _ = trial_cost(A2_1G, workers=1, gpus_per_worker=0.25, seconds=HOUR)
    assert on_8g == pytest.approx(29.387 / 32)  # $0.9183/h
    assert on_1g == pytest.approx(3.673 / 4)  # $0.9183/h: the A100 is priced alike in both
    assert on_8g < A2_1G.price_per_hour
    assert gpuh == pytest.approx(0.25)


def test_one_gpu_worker_on_an_8_gpu_machine_pays_an_eighth():
    cost, _ = trial_cost(A2_8G, workers=1, gpus_per_worker=1, seconds=HOUR / 2)
    assert cost == pytest.approx(29.387 / 8 / 2)


def test_cpu_workers_pay_their_cpus_over_the_machines_vcpus():
    cost, gpuh = trial_cost(N1_8, workers=2, gpus_per_worker=0, cpus_per_worker=2, seconds=HOUR)
    assert cost == pytest.approx(0.38 * 4 / 8)  # 4 of 8 vCPUs
    assert gpuh == 0
    e2 = machine("e2-standard-2")  # the quickstart: 1 worker × 1 CPU of 2 vCPUs
    cost, _ = trial_cost(e2, workers=1, gpus_per_worker=0, cpus_per_worker=1, seconds=HOUR)
    assert cost == pytest.approx(0.067 / 2)


def test_workers_that_spill_over_one_machine_pay_whole_machines():
    # 12 one-GPU workers need two 8-GPU machines: 2 × $29.387, not 1.5 ×.
    cost, _ = trial_cost(A2_8G, workers=12, gpus_per_worker=1, seconds=HOUR)
    assert cost == pytest.approx(2 * 29.387)
    # 3 workers × 3 of 8 vCPUs: two fit a machine, the third needs a second one.
    assert machines_billed(N1_8, workers=3, gpus_per_worker=0, cpus_per_worker=3) == 2
    # 5 workers × 0.4 of a machine add up to exactly 2.0 but pack 2 + 2 + 1: three machines.
    m = Machine("m", 5, 20, 1.0)
    assert machines_billed(m, workers=5, gpus_per_worker=0, cpus_per_worker=2) == 3
    # two 1-GPU workers on 1-GPU machines: two machines
    assert machines_billed(A2_1G, workers=2, gpus_per_worker=1, cpus_per_worker=1) == 2


def test_a_worker_pays_the_larger_of_its_gpu_and_cpu_shares():
    # 0.25 GPU but all 12 vCPUs of an a2-highgpu-1g: nothing else fits beside it.
    assert worker_share(A2_1G, 0.25, cpus_per_worker=12) == pytest.approx(1.0)
    assert worker_share(A2_8G, 1, cpus_per_worker=1) == pytest.approx(1 / 8)
    assert worker_share(N1_8, 0, cpus_per_worker=8) == pytest.approx(1.0)


def test_billing_never_exceeds_whole_machines_per_worker_nor_drops_below_the_share():
    for workers in range(1, 20):
        for gpus in (0.25, 0.5, 1, 2, 4, 8):
            n = machines_billed(A2_8G, workers=workers, gpus_per_worker=gpus, cpus_per_worker=1)
            share = workers * gpus / 8
            assert share - 1e-9 <= n <= max(share, math.ceil(share)) + workers
            if share > 1:
                assert n == int(n)  # whole machines once a trial spills over one


# ----- item 10: spot prices --------------------------------------------------------------------


def test_preemptible_is_billed_at_the_spot_price():
    cost, _ = trial_cost(A2_8G, workers=8, gpus_per_worker=1, seconds=HOUR, preemptible=True)
    assert cost == pytest.approx(11.5)


def test_preemptible_without_a_spot_price_is_an_error():
    with pytest.raises(KeyError, match="no spot price"):
        trial_cost(A2_1G, workers=1, gpus_per_worker=1, seconds=HOUR, preemptible=True)


def test_shipped_table_has_dated_spot_prices_below_on_demand():
    from tracking.costs import DEFAULT_TABLE

    text = DEFAULT_TABLE.read_text()
    assert "spot" in text.lower() and "list prices" in text.lower()
    table = machines()
    gce = ["e2-standard-2", "n1-standard-8", "n1-standard-8-t4", "g2-standard-8"]
    gce += ["a2-highgpu-1g", "a2-highgpu-8g", "a3-highgpu-8g"]
    for name in gce:
        m = table[name]
        assert m.spot_price_per_hour is not None, name
        assert 0 < m.spot_price_per_hour < m.price_per_hour, name
    # AWS Spot has no list price (a market price per zone): those stay on-demand only
    assert table["p4d.24xlarge"].spot_price_per_hour is None


def test_spec_field_preemptible_defaults_to_false():
    assert make_spec().resources.preemptible is False
    assert make_spec(resources={"preemptible": True}).resources.preemptible is True


def test_preemptible_on_a_machine_without_spot_price_fails_validation_naming_the_field():
    spec = make_spec(resources={"machine_type": "p4d.24xlarge", "preemptible": True})
    with pytest.raises(SpecError, match=r"resources.preemptible: .*p4d.24xlarge.*no spot price"):
        check_spec_prices(spec)
    from sweeps import api

    with pytest.raises(SpecError, match="resources.preemptible"):
        api.validate_spec(spec)
    check_spec_prices(make_spec(resources={"machine_type": "a2-highgpu-8g", "preemptible": True}))


def test_searched_machine_types_are_all_checked_for_spot_prices():
    spec = make_spec(
        resources={"preemptible": True},
        search_space={
            "lr": {"type": "float", "low": 0.001, "high": 0.01},
            "resources.machine_type": {
                "type": "categorical",
                "choices": ["e2-standard-2", "g5.xlarge"],
            },
        },
    )
    with pytest.raises(SpecError, match="resources.preemptible: .*g5.xlarge"):
        check_spec_prices(spec)


# ----- item 9: the price before launching ------------------------------------------------------


def test_spec_cost_facts_of_one_trial_and_the_budget():
    spec = make_spec(
        budget={"trials": 10, "parallel": 2, "timeout_s": 1800},
        resources={"machine_type": "a2-highgpu-8g", "workers": 8, "gpus_per_worker": 1},
    )
    f = spec_cost_facts(spec)
    assert f["machine_type"] == "a2-highgpu-8g"
    assert f["price"] == "on-demand" and f["spot"] is False
    assert f["machines_per_trial"] == pytest.approx(1.0)
    assert f["cost_per_hour_usd"] == pytest.approx(29.387)
    assert f["trial_hours_bound"] == pytest.approx(0.5)
    assert f["worst_case_cost_usd"] == pytest.approx(10 * 29.387 * 0.5)
    assert "budget.timeout_s" in f["worst_case_basis"]


def test_spec_cost_facts_spot_and_no_duration_bound():
    spec = make_spec(
        budget={"trials": 4},
        resources={"machine_type": "a2-highgpu-8g", "gpus_per_worker": 1, "preemptible": True},
    )
    f = spec_cost_facts(spec)
    assert f["price"] == "spot" and f["spot"] is True
    assert f["cost_per_hour_usd"] == pytest.approx(machine("a2-highgpu-8g").spot_price_per_hour / 8)
    assert f["worst_case_cost_usd"] is None
    assert "no bound" in f["worst_case_basis"]


def test_spec_cost_facts_hard_money_cap_bounds_the_worst_case():
    spec = make_spec(
        budget={"trials": 40, "max_cost_usd": 5.0, "hard": True},
        resources={"machine_type": "e2-standard-2"},
    )
    f = spec_cost_facts(spec)
    assert f["worst_case_cost_usd"] == pytest.approx(5.0)
    assert "hard" in f["worst_case_basis"]


def test_spec_cost_facts_searched_resources_take_the_dearest_shape():
    spec = make_spec(
        budget={"trials": 3, "timeout_s": 3600},
        search_space={
            "lr": {"type": "float", "low": 0.001, "high": 0.01},
            "resources.workers": {"type": "int", "low": 1, "high": 4},
            "resources.machine_type": {
                "type": "categorical",
                "choices": ["e2-standard-2", "n1-standard-8"],
            },
        },
    )
    f = spec_cost_facts(spec)
    assert f["machine_type"] == ["e2-standard-2", "n1-standard-8"]
    # dearest: 4 workers × 1 CPU on e2-standard-2 = 2 machines × $0.067 > 0.5 × $0.38
    assert f["cost_per_hour_usd"] == pytest.approx(max(2 * 0.067, 0.38 * 4 / 8))
    assert f["worst_case_cost_usd"] == pytest.approx(3 * f["cost_per_hour_usd"] * 1.0)


def _cli(*args: str):
    from sweeps.cli import app

    return CliRunner().invoke(app, list(args))


def test_validate_json_prints_the_cost_facts(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text(
        "name: priced\n"
        "search_space: {lr: {type: float, low: 0.001, high: 0.01}}\n"
        "budget: {trials: 10, timeout_s: 1800}\n"
        "resources: {workers: 8, gpus_per_worker: 1, machine_type: a2-highgpu-8g}\n"
    )
    r = _cli("validate", str(spec), "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["name"] == "priced"
    assert doc["cost_per_hour_usd"] == pytest.approx(29.387)
    assert doc["worst_case_cost_usd"] == pytest.approx(10 * 29.387 / 2)
    assert doc["machine_type"] == "a2-highgpu-8g" and doc["price"] == "on-demand"
    text = _cli("validate", str(spec), "--set", "resources.preemptible=true")
    assert text.exit_code == 0, text.output
    line = [ln for ln in text.stdout.splitlines() if "$" in ln]
    assert len(line) == 1 and "spot" in line[0] and "a2-highgpu-8g" in line[0], text.stdout


def test_validate_preemptible_without_spot_price_exits_2(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text("name: aws\nresources: {machine_type: p5.48xlarge, preemptible: true}\n")
    r = _cli("validate", str(spec))
    assert r.exit_code == 2
    assert "resources.preemptible" in r.output


def test_the_price_table_the_readme_says_to_edit_is_the_shipped_one(tmp_path, monkeypatch):
    import os
    import subprocess
    import sys

    from conftest import ROOT

    from tracking.costs import DEFAULT_TABLE, machines

    assert machines(str(ROOT / "conf" / "machines.yaml")) == machines(str(DEFAULT_TABLE))
    bad = tmp_path / "machines.yaml"
    bad.write_text("../tracking/machines.yaml\n")  # what a lost symlink leaves behind
    env = {"SWEEPS_MACHINES": str(bad), "SWEEPS_HOME": str(tmp_path / "home")}
    r = subprocess.run(
        [sys.executable, "-m", "sweeps.cli", "validate", str(ROOT / "conf" / "quickstart.yaml")],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2, r.stderr
    assert f"price table {bad}: not a price table" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_a_legacy_job_pays_a_whole_machine_for_its_master_and_each_worker():
    """Issue 29 item 17: AI Platform runs each replica on a VM of its own, so master
    n1-standard-4 plus workerCount 1 costs two machines ($0.38/h), not half of one."""
    from types import SimpleNamespace

    from conftest import ROOT

    from sweeps.driver.trial_config import trial_resources
    from sweeps.importers.aiplatform import load_config, to_spec
    from sweeps.spec import spec_from_dict
    from tracking.costs import cost_line, resources_cost

    pkg = ROOT / "examples" / "aiplatform_trainer"
    raw, _ = to_spec(
        load_config(pkg / "config.yaml"), name="legacy", package_path=str(pkg), module_name="t"
    )
    spec = spec_from_dict(raw)
    r = SimpleNamespace(**trial_resources(spec, {}))
    assert resources_cost(r, HOUR)[0] == pytest.approx(2 * 0.19)
    assert spec_cost_facts(spec)["cost_per_hour_usd"] == pytest.approx(0.38)
    assert "× 2 machine" in cost_line(spec_cost_facts(spec))
    # A native spec of the same shape still pays the share its workers reserve.
    native = make_spec(resources={"workers": 2, "machine_type": "n1-standard-4"})
    assert resources_cost(SimpleNamespace(**trial_resources(native, {})), HOUR)[0] == pytest.approx(
        0.095
    )
