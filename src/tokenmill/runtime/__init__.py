"""The real engine: torch model code, the ``TorchExecutor`` that runs the serving core's batches,
the tokenizer and the embedded default model. Imports torch; nothing upstream imports this."""
