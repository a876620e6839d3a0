"""The stages of one evaluation, in the order `harness.evaluation.evaluate` runs them.

- context.py    what every stage shares (the config, the device slot's gate, the record being
                written, the phase times; the reference session is passed beside it) and how a
                child process's failure becomes a verdict
- source.py     1. the solution's code: extracted from a raw response, statically checked
- build.py      2. its extensions built in a child (content-addressed cache, compile timeout)
- candidate.py  3. the candidate's processes: started, ModelNew built, more of them for timing
- check.py      4. correctness: the candidate's trials, the reference's, judged in the parent
- timed.py      5. timing: process pairs measured in alternating rounds, every check applied
- kernels.py    6. on a GPU: did a kernel the solution defines run
- record.py     7. the speedup with its interval, and the record closed with its verdict
"""
