"""Data the shipped specs read: the catalog of data sets, `pats data fetch` and `pats data list`."""

from pats.data.catalog import BY_NAME, DATASETS, DataFile, Dataset, GameArchive
from pats.places import data_root

__all__ = ["BY_NAME", "DATASETS", "DataFile", "Dataset", "GameArchive", "data_root"]
