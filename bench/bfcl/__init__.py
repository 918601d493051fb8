"""`python -m bench.bfcl`: BFCL through reflexguard, with BFCL's own handler and checker.

BFCL (bfcl-eval) lives in its own virtualenv, .venv-bfcl (scripts/setup_bfcl.sh); this
package runs its CLI there as a subprocess (bench/bfcl/launch.py) pointed at reflexguard.
"""
