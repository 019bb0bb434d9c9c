"""flexcomm's shared cost model: units, the cluster object, collective formulas, calibration."""
