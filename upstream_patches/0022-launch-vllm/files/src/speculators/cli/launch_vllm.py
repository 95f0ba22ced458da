"""``speculators launch-vllm``: serve a verifier so that vLLM writes hidden states."""

import typer


def launch_vllm(ctx: typer.Context) -> None:
    """Launch vLLM to generate the verifier's hidden states for training.

    Runs ``vllm serve MODEL`` with the extract_hidden_states speculative method
    and a hidden-states KV connector, on the layers ``speculators train`` reads
    (use ``--help`` to see every flag). Arguments after ``--`` go to vLLM.

    \b
    Examples:
        speculators launch-vllm moonshotai/Kimi-K2.5 --trust-remote-code \\
            --hidden-states-path ./hs -- --tensor-parallel-size 8
        speculators launch-vllm ./verifier --dry-run -- --port 8000
    """
    from speculators.data_generation.vllm_launch import main  # noqa: PLC0415

    main(ctx.args)
