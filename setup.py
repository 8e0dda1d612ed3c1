"""setuptools' setup script, which its PEP 517 hooks run (deploy/build_backend.py, the
backend): the metadata is pyproject.toml's; the extension modules are the backend's."""

from build_backend import ext_modules  # deploy/, on the path as pyproject's backend-path
from setuptools import setup

setup(ext_modules=ext_modules())
