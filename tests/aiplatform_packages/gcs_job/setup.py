"""Dependencies of the trainer, installed by the service before it runs trainer.task."""

import os

from setuptools import find_packages, setup

HERE = os.path.dirname(os.path.abspath(__file__))

REQUIRED_PACKAGES = [
    "cloudml-hypertune",
    "google-cloud-storage",
    "torch",
    # Not on any index: installed from next to this file, or the job cannot start.
    f"tinydep @ file://{os.path.join(HERE, 'tinydep')}",
]

setup(
    name="trainer",
    version="0.1",
    packages=find_packages(include=["trainer"]),
    install_requires=REQUIRED_PACKAGES,
    description="A hyperparameter tuning job that writes its model to the job dir.",
)
