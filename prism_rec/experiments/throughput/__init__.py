"""Training throughput and peak memory of every backbone across sequence lengths (paper section 5.3).

One training step is the one ``fit`` trains with, ``prism_rec.training.step.TrainingStep`` (eager):
``SequentialRecommender`` (tied token/item embedding, the backbone, final norm), full softmax cross-entropy
over the whole vocabulary or item table at every position, then backward and an AdamW step, in bf16
autocast on CUDA. Each case runs warm-up steps, then timed steps (CUDA events) until the step count or the
per-case time budget is reached; the median step time gives tokens/s = batch * length / step time.

Configurations: "paper" (CUDA) is the paper's 0.13B language-model shape (d_model 768, 8 layers,
vocabulary 32,000) at 2K x 8, 4K x 4, 8K x 2 and 16K x 1, plus the recommendation default (d_model 64,
2 layers, 2 heads, 58,636 items as in Movies) at 200 x 256; "tiny" (CPU, for CI) is the same program
at toy sizes. Results go to MLflow (experiment "throughput", when mlflow is importable) and to
``<results-dir>/throughput.md`` and ``throughput.png`` (``throughput-tiny.*`` for the tiny one).
"""
