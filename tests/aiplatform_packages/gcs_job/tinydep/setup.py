from setuptools import setup

setup(name="tinydep", version="1.0", packages=["tinydep"])
