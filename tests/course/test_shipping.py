"""What the checkers ship to their child process pickles on a GPU machine too.

A compiled ``@triton.jit`` kernel (what every kernel is on a GPU machine) holds a lock and device caches
that cannot be pickled; the exercise specs name the package's kernels. Shown on any machine in a fresh
process with the interpreter off, where the kernels are compiled-mode objects, as on a GPU.
"""

import os
import subprocess
import sys
import textwrap


def test_every_kernel_exercise_spec_travels_with_its_kernels_by_reference():
    code = textwrap.dedent("""
        import copyreg, pickle, cloudpickle
        from triton.runtime.jit import JITFunction
        from rmsnorm.article import rmsnorm_forward_kernel
        assert isinstance(rmsnorm_forward_kernel, JITFunction)  # compiled mode, as on a GPU
        from rmsnorm_course.checkers import ex03_forward, ex04_dx, ex05_dgamma, ex08_n_vs_block
        from rmsnorm_course.checkers import ex09_long_row, ex10_one_pass, shipping
        for module in (ex03_forward, ex04_dx, ex05_dgamma, ex08_n_vs_block, ex09_long_row, ex10_one_pass):
            spec = getattr(module, "SPEC", None) or module.SPEC_FIX
            again = pickle.loads(shipping.dumps(spec))
            assert again.reference is spec.reference, module.__name__
        # the rule is the checkers' pickler's own: the process's table (which Inductor's pickles use) is untouched
        assert JITFunction not in copyreg.dispatch_table
        try:
            cloudpickle.dumps(rmsnorm_forward_kernel)
        except TypeError:
            print("ok")
        """)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["ok"]
