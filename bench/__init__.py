"""The LLMA benchmark (`python -m bench`) and the copy-policy tuner (`python -m bench.tune`).

workloads: which questions, prompts and references; methods: the decoding methods (the only caller of
`decoding`); run: timing them side by side; results: what was measured (results.json); report and plots:
the markdown and PNGs drawn from it.
"""
