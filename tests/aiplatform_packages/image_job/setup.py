"""Dependencies of the trainer, installed by the service before it runs trainer.task.

The job's image reaches no package index, so the one requirement it lacks, cloudml-hypertune,
ships with the package: deps/ holds its sdist as `pip download cloudml-hypertune` saved it."""

import os

from setuptools import find_packages, setup

HERE = os.path.dirname(os.path.abspath(__file__))
HYPERTUNE = os.path.join(HERE, "deps", "cloudml-hypertune-0.1.0.dev6.tar.gz")

REQUIRED_PACKAGES = [f"cloudml-hypertune @ file://{HYPERTUNE}"]

setup(
    name="trainer",
    version="0.1",
    packages=find_packages(include=["trainer"]),
    install_requires=REQUIRED_PACKAGES,
    description="A hyperparameter tuning job run in a custom container.",
)
