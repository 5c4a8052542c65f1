"""The MLflow pyfunc model of a built-in network ("models from code": MLflow loads this file).

It rebuilds the network from its build config (`arch.json`) and loads its weights with
`torch.load(..., weights_only=True)`, so loading a registered model never unpickles code.
"""

import json

import mlflow
import numpy as np
import torch


class BuiltinModel(mlflow.pyfunc.PythonModel):
    def load_context(self, context):  # noqa: ANN001, ANN201 - MLflow's signature
        from trainer.models import build_model

        with open(context.artifacts["arch"]) as f:
            info = json.load(f)
        self.info = info
        self.model = build_model(
            info["model"], tuple(info["input_shape"]), info["num_classes"], **info["arch"]
        )
        state = torch.load(context.artifacts["weights"], map_location="cpu", weights_only=True)
        self.model.load_state_dict(state)
        self.model.eval()

    def predict(self, context, model_input, params=None):  # noqa: ANN001, ANN201
        x = torch.as_tensor(np.asarray(model_input, dtype=np.float32))
        if x.dim() == len(self.info["input_shape"]):  # one sample
            x = x.unsqueeze(0)
        with torch.no_grad():
            return self.model(x).numpy()


mlflow.models.set_model(BuiltinModel())
