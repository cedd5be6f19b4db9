"""Run one unittest module and write what happened to a JSON file (used by numba_suite.py).

``python suite_runner.py MODULE OUT.json``: loads ``MODULE`` with unittest's loader, runs it
with a result that records the id of every test that failed, errored, was skipped or ran
(expected failures count as passes, unexpected successes as failures, as unittest reports
them), and writes ``{"module", "ran", "failed", "errors", "skipped", "details", "seconds"}``.
Standard library only: it runs inside the process whose kernels are under test.
"""
import json
import sys
import time
import traceback
import unittest

_DETAIL = 1500  # characters of each traceback kept (the end, where the error is)


class _Recorder(unittest.TextTestResult):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.record = {"failed": [], "errors": [], "skipped": [], "details": {}}

    def _note(self, kind, test, err=None):
        self.record[kind].append(test.id())
        if err is not None:
            text = "".join(traceback.format_exception(*err))
            self.record["details"][test.id()] = text[-_DETAIL:]

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._note("failed", test, err)

    def addError(self, test, err):
        super().addError(test, err)
        # setUpClass / module fixtures fail as a _ErrorHolder whose id names the class
        self._note("errors", test, err)

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self.record["skipped"].append(test.id())

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._note("failed", test)

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            kind = "failed" if issubclass(err[0], test.failureException) else "errors"
            self._note(kind, subtest, err)


def main(argv):
    module, out = argv[1], argv[2]
    start = time.perf_counter()
    record = {"module": module}
    try:
        suite = unittest.defaultTestLoader.loadTestsFromName(module)
        runner = unittest.TextTestRunner(stream=sys.stderr, verbosity=1, resultclass=_Recorder)
        result = runner.run(suite)
        record.update(result.record, ran=result.testsRun)
    except BaseException as exc:  # an import error: the whole module is one error
        record.update(ran=0, failed=[], skipped=[], errors=[module],
                      details={module: "".join(traceback.format_exception(exc))[-_DETAIL:]})
    record["seconds"] = round(time.perf_counter() - start, 2)
    with open(out, "w") as f:
        json.dump(record, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
