#!/usr/bin/env python3
"""A model trained by Python's xgboost, the way a data scientist would hand one over, loads in
txscore and predicts exactly what it predicts in Python.

The Python model deliberately uses a subset of txscore's features in a different order, with
its own feature schema file, so the schema mapping is exercised too."""
import argparse
import csv
import json
import math
import os
import shutil
import subprocess
import tempfile

import numpy as np
import xgboost as xgb


def read_csv(path):
    with open(path) as f:
        rows = list(csv.reader(f))
    header, body = rows[0], rows[1:]
    values = np.array([[float(c) if c != "" else math.nan for c in row] for row in body], dtype=np.float32)
    return header, values


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--txscore", required=True)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="txscore-pymodel-")
    try:
        train_csv, test_csv = os.path.join(work, "train.csv"), os.path.join(work, "test.csv")
        for path, seed in ((train_csv, 3), (test_csv, 4)):
            subprocess.run([args.txscore, "data", "generate", "--out", path, "--cards", "300", "--days", "10",
                            "--seed", str(seed)], check=True, stderr=subprocess.DEVNULL)
        header, train = read_csv(train_csv)
        _, test = read_csv(test_csv)
        label = header.index("label")
        features = [name for name in header if name != "label"]
        chosen = list(reversed(features[:14]))  # a subset, in another order
        columns = [header.index(name) for name in chosen]

        booster = xgb.train({"tree_method": "hist", "objective": "binary:logistic", "max_depth": 4, "eta": 0.3,
                             "nthread": 1, "seed": 1},
                            xgb.DMatrix(train[:, columns], label=train[:, label], missing=math.nan,
                                        feature_names=chosen),
                            num_boost_round=30)
        expected = booster.predict(xgb.DMatrix(test[:, columns], missing=math.nan, feature_names=chosen))

        for extension in ("json", "ubj"):
            model = os.path.join(work, f"handover.{extension}")
            booster.save_model(model)
            with open(os.path.join(work, "handover.features.json"), "w") as f:
                json.dump({"format": "txscore.feature_schema/1", "features": [{"name": n} for n in chosen]}, f)
            with open(test_csv) as stdin:
                out = subprocess.run([args.txscore, "model", "predict", "--model", model], stdin=stdin,
                                     check=True, capture_output=True, text=True).stdout
            got = np.array([float(line) for line in out.split()], dtype=np.float32)
            assert got.shape == expected.shape, (got.shape, expected.shape)
            worst = float(np.max(np.abs(got - expected)))
            assert worst <= 1e-6, f"{extension}: largest difference {worst}"
            print(f"python_model_test: {extension}: {len(got)} predictions, largest difference {worst:g}")

        # A schema that disagrees with the model's feature count is refused, naming both numbers.
        with open(os.path.join(work, "handover.features.json"), "w") as f:
            json.dump({"format": "txscore.feature_schema/1", "features": [{"name": n} for n in chosen[:3]]}, f)
        refused = subprocess.run([args.txscore, "model", "predict", "--model", os.path.join(work, "handover.json")],
                                 stdin=subprocess.DEVNULL, capture_output=True, text=True)
        assert refused.returncode == 1, refused
        assert "expects 14 features but its schema" in refused.stderr and "lists 3" in refused.stderr, refused.stderr
        # --schema names a schema kept elsewhere: it is used instead of the one beside the model.
        with open(os.path.join(work, "elsewhere.json"), "w") as f:
            json.dump({"format": "txscore.feature_schema/1", "features": [{"name": n} for n in chosen]}, f)
        with open(test_csv) as stdin:
            out = subprocess.run([args.txscore, "model", "predict", "--model", os.path.join(work, "handover.json"),
                                  "--schema", os.path.join(work, "elsewhere.json")], stdin=stdin,
                                 check=True, capture_output=True, text=True).stdout
        got = np.array([float(line) for line in out.split()], dtype=np.float32)
        assert got.shape == expected.shape and float(np.max(np.abs(got - expected))) <= 1e-6, "--schema"
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
