"""The harness's version: a leaf module, so that no module needs to import the package itself."""
__version__ = "0.1.0"
