"""Embeddings through a port: the offline local embedder (default) or an OpenAI-compatible one.

``local`` uses WordLlama's static word embeddings (256 dimensions), whose weights and tokenizer
ship inside the ``wordllama`` package: nothing is downloaded at run time. ``openai`` calls any
OpenAI-compatible ``/embeddings`` endpoint through the official SDK.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from fleet.errors import ModelError


class Embedder(Protocol):
    """Texts in, one float32 vector each out."""

    #: Recorded with every stored vector (vectors of different embedders are never compared).
    name: str

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]: ...


class LocalEmbedder:
    """WordLlama, loaded from the package's own files (once per process)."""

    name = "local:wordllama-l2-supercat-256"

    def __init__(self) -> None:
        self._model: Any = None
        self._lock = threading.Lock()

    def _load(self) -> Any:
        with self._lock:
            if self._model is None:
                import pathlib

                import wordllama
                from wordllama import WordLlama

                # (its lookup of the bundled tokenizer misses the package folder; name it)
                self._model = WordLlama.load(
                    config="l2_supercat",
                    dim=256,
                    cache_dir=pathlib.Path(wordllama.__file__).parent,
                    disable_download=True,
                )
            return self._model

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        if not texts:
            return np.zeros((0, 256), dtype=np.float32)
        return np.asarray(self._load().embed(list(texts)), dtype=np.float32)


class OpenAIEmbedder:
    """Any OpenAI-compatible embeddings endpoint (OpenAI, vLLM, Ollama, LiteLLM, Azure)."""

    def __init__(
        self,
        *,
        model: str,
        base_url: str,
        api_key: str | None,
        timeout_s: float = 30.0,
        max_retries: int = 3,
        dimensions: int | None = None,
    ) -> None:
        import openai

        self.name = f"openai:{model}" + (f"-{dimensions}" if dimensions else "")
        self._model = model
        self._dimensions = dimensions
        self._client = openai.OpenAI(
            base_url=base_url,
            api_key=api_key or "unused",
            timeout=timeout_s,
            max_retries=max_retries,
        )

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        import openai

        if not texts:
            return np.zeros((0, self._dimensions or 1), dtype=np.float32)
        extra: dict[str, Any] = {}
        if self._dimensions:
            extra["dimensions"] = self._dimensions
        try:
            reply = self._client.embeddings.create(model=self._model, input=list(texts), **extra)
        except openai.OpenAIError as exc:
            raise ModelError(
                f"embeddings {self.name} failed: {type(exc).__name__}: {exc}"
            ) from None
        ordered = sorted(reply.data, key=lambda d: d.index)
        return np.asarray([d.embedding for d in ordered], dtype=np.float32)


def to_bytes(vector: npt.NDArray[np.float32]) -> bytes:
    return np.asarray(vector, dtype="<f4").tobytes()


def from_bytes(data: bytes) -> npt.NDArray[np.float32]:
    return np.frombuffer(data, dtype="<f4").astype(np.float32)
