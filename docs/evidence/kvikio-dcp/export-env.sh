# gdsfleet: vm: direct path NOT proven: compat (POSIX) I/O; ledger /var/tmp/gdsfleet-kvikio-dcp/ledger.sqlite
export KVIKIO_COMPAT_MODE=ON
export CUFILE_ENV_PATH_JSON=/etc/cufile.json
export GDSFLEET_GDS_MOUNT=/var/tmp/gdsfleet-io
