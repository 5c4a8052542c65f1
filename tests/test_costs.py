from __future__ import annotations

import pytest

from tracking.costs import Machine, machine, machines, trial_cost


def test_shipped_table_has_cpu_and_gpu_machines():
    table = machines()
    assert table["local"].price_per_hour == 0
    assert any(m.gpu_count for m in table.values())
    assert machine("e2-standard-2").price_per_hour > 0


def test_cost_is_price_times_time_times_workers():
    m = Machine("m", 4, 16, price_per_hour=2.0)
    cost, gpuh = trial_cost(m, workers=3, gpus_per_worker=0, seconds=1800)
    assert cost == pytest.approx(2.0 * 0.5 * 3)
    assert gpuh == 0


def test_fractional_gpu_pays_its_fraction():
    m = Machine("g", 8, 32, price_per_hour=4.0, gpu="l4", gpu_count=1)
    cost, gpuh = trial_cost(m, workers=2, gpus_per_worker=0.25, seconds=3600)
    assert cost == pytest.approx(4.0 * 0.25 * 2)
    assert gpuh == pytest.approx(0.5)
    whole, gpuh1 = trial_cost(m, workers=1, gpus_per_worker=1, seconds=3600)
    assert whole == pytest.approx(4.0) and gpuh1 == pytest.approx(1.0)


def test_unknown_machine_is_named():
    with pytest.raises(KeyError, match="resources.machine_type: unknown machine 'z9'"):
        machine("z9")
