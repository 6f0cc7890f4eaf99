"""analysis.leverage and task_leverage on tables small enough to compute by hand."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

import analysis

PARADIGMS = {"sft": "sft", "dpo": "offline", "simpo": "offline_ref_free", "kto": "unpaired", "grpo": "online"}
FAMILIES = {"sft": "sft", "offline": "preference", "offline_ref_free": "preference", "unpaired": "preference"}
PARAMS = {"tiny": 1_000_000, "small": 10_000_000}

#: Cell means of the worked example (two seeds each, at mean ± 0.01).
MEANS = {
    ("tiny", "sft"): 0.30,
    ("tiny", "dpo"): 0.40,
    ("tiny", "simpo"): 0.50,
    ("tiny", "grpo"): 0.60,
    ("small", "sft"): 0.40,
    ("small", "dpo"): 0.60,
    ("small", "simpo"): 0.55,
    ("small", "grpo"): 0.80,
}


def run_rows(scale: str, method: str, values: list[float], lora: bool = False, **metrics) -> list[dict]:
    paradigm = PARADIGMS[method]
    return [
        {
            "scale": scale,
            "scale_params": PARAMS[scale],
            "method": method,
            "paradigm": paradigm,
            "family": FAMILIES.get(paradigm, "online"),
            "online": paradigm == "online",
            "seed": seed,
            "lora": lora,
            "accuracy": value,
            **{k: v[seed] for k, v in metrics.items()},
        }
        for seed, value in enumerate(values)
    ]


def example() -> pd.DataFrame:
    rows = [r for (s, m), mean in MEANS.items() for r in run_rows(s, m, [mean - 0.01, mean + 0.01])]
    return pd.DataFrame(rows)


def test_eta_squared_by_hand():
    """Groups A = [1, 3], B = [5, 7]: grand mean 4; SS_between = 2·(2−4)² + 2·(6−4)² = 16;
    SS_total = 9 + 1 + 1 + 9 = 20; η² = 0.8."""
    assert analysis.eta_squared(pd.Series([1, 3, 5, 7]), pd.Series(list("AABB"))) == pytest.approx(0.8)
    assert math.isnan(analysis.eta_squared(pd.Series([2, 2]), pd.Series(list("AB"))))


def test_leverage_range_points_by_hand():
    """Cell means (table MEANS):

    ========  ====  ====  =====  ====
    scale     sft   dpo   simpo  grpo
    ========  ====  ====  =====  ====
    tiny      .30   .40   .50    .60
    small     .40   .60   .55    .80
    ========  ====  ====  =====  ====

    * scale (method fixed): ranges .10, .20, .05, .20 -> mean .1375 -> 13.75 points.
    * paradigm (scale fixed; one method per paradigm): tiny .60 − .30 = .30, small .80 − .40 = .40
      -> 35 points.
    * online_vs_offline (scale fixed; offline level = mean of sft, dpo, simpo):
      tiny .60 − .40 = .20; small .80 − (.40+.60+.55)/3 = .80 − .516667 = .283333 -> 24.1667 points.
    * loss (preference only: dpo, simpo): tiny .10, small .05 -> 7.5 points.
    * lora does not vary: no row.
    """
    out = analysis.leverage(example()).set_index("factor")
    assert list(out.index) == ["paradigm", "online_vs_offline", "scale", "loss"]
    expected = {"paradigm": 35.0, "online_vs_offline": 24.1667, "scale": 13.75, "loss": 7.5}
    assert out["range_points"].to_dict() == pytest.approx(expected, abs=1e-4)
    assert out["n_contexts"].to_dict() == {"paradigm": 2, "online_vs_offline": 2, "scale": 4, "loss": 2}
    assert out["n_levels"].to_dict() == {"paradigm": 4, "online_vs_offline": 2, "scale": 2, "loss": 2}
    assert out.at["loss", "n_runs"] == 8 and out.at["scale", "n_runs"] == 16


def test_leverage_eta_squared_by_hand():
    """η² for loss over the 8 preference runs:

    dpo  = [.39, .41, .59, .61], mean .5;  simpo = [.49, .51, .54, .56], mean .525; grand .5125.
    SS_between = 4·(.0125)² + 4·(.0125)² = .00125.
    SS_total = (.1225² + .1025² + .0775² + .0975²) + (.0225² + .0025² + .0275² + .0475²)
             = .041025 + .003525 = .04455.
    η² = .00125/.04455 = .028058.
    For scale the one-way ANOVA F gives the same number: η² = F·df_b / (F·df_b + df_w).
    """
    df = example()
    out = analysis.leverage(df).set_index("factor")
    assert out.at["loss", "eta_squared"] == pytest.approx(0.00125 / 0.04455)
    f = stats.f_oneway(*[g["accuracy"] for _, g in df.groupby("scale")]).statistic
    assert out.at["scale", "eta_squared"] == pytest.approx(f * 1 / (f * 1 + (len(df) - 2)))


def test_leverage_skips_contexts_with_a_single_level_and_adds_lora():
    """A kto run only at tiny and a LoRA dpo run at tiny (mean .46 vs .40 without LoRA).

    scale: the contexts (kto, no LoRA) and (dpo, LoRA) each have one scale and are skipped, so
    n_contexts stays 4 and the range stays 13.75 points.
    lora now varies: only the context (tiny, dpo) has both levels -> .46 − .40 = 6 points.
    """
    df = example()
    extra = run_rows("tiny", "kto", [0.2, 0.2]) + run_rows("tiny", "dpo", [0.45, 0.47], lora=True)
    out = analysis.leverage(pd.concat([df, pd.DataFrame(extra)], ignore_index=True)).set_index("factor")
    assert out.at["scale", "range_points"] == pytest.approx(13.75) and out.at["scale", "n_contexts"] == 4
    assert out.at["lora", "range_points"] == pytest.approx(6.0) and out.at["lora", "n_contexts"] == 1


def test_leverage_drops_nan_and_reports_factor_without_contexts_as_nan():
    """Each method was run at one scale only, so no context has two scales (or two paradigms, or
    two losses): range_points is NaN with n_contexts 0, while η² is still defined. The NaN metric
    value is dropped (3 runs remain)."""
    rows = run_rows("tiny", "dpo", [0.4, 0.5]) + run_rows("small", "simpo", [0.7, math.nan])
    out = analysis.leverage(pd.DataFrame(rows)).set_index("factor")
    assert set(out.index) == {"scale", "paradigm", "loss"} and out["range_points"].isna().all()
    assert (out["n_contexts"] == 0).all()
    assert out.at["scale", "n_runs"] == 3
    # values .4, .5 | .7: grand .5333; SS_b = 2(.45−.5333)² + (.7−.5333)² = .041667; SS_t = .046667
    assert out.at["scale", "eta_squared"] == pytest.approx(0.041667 / 0.046667, abs=1e-4)


def test_task_leverage_by_hand():
    """tiny: accuracy means sft .30, dpo .40 -> id spread 10 points; ood means .10, .30 -> 20 points;
    ratio 2; best in-distribution and OOD: dpo. small: grpo lacks OOD and is left out; sft .5/.2,
    dpo .5/.2 -> both spreads 0, ratio NaN."""
    rows = (
        run_rows("tiny", "sft", [0.29, 0.31], ood_accuracy=[0.1, 0.1])
        + run_rows("tiny", "dpo", [0.4, 0.4], ood_accuracy=[0.25, 0.35])
        + run_rows("small", "sft", [0.5], ood_accuracy=[0.2])
        + run_rows("small", "dpo", [0.5], ood_accuracy=[0.2])
        + run_rows("small", "grpo", [0.9], ood_accuracy=[np.nan])
    )
    out = analysis.task_leverage(pd.DataFrame(rows))
    assert out["scale"].tolist() == ["tiny", "small"]
    tiny, small = out.iloc[0], out.iloc[1]
    assert tiny["id_spread"] == pytest.approx(10) and tiny["ood_spread"] == pytest.approx(20)
    assert tiny["ratio"] == pytest.approx(2) and tiny["id_best"] == "dpo" and tiny["ood_best"] == "dpo"
    assert small["n_methods"] == 2 and small["id_spread"] == 0 and math.isnan(small["ratio"])
