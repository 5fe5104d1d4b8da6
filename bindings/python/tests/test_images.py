"""Prompts with images on the tiny SmolVLM folder (tests/data/hf/smolvlm-tiny), against cellm-host run --image."""

from __future__ import annotations

import base64

import pytest

import cellm
from conftest import REPO, host_run

FOLDER = REPO / "tests/data/hf/smolvlm-tiny"
IMAGE = REPO / "tests/data/vision/smolvlm_rgb_20x48.png"
PROMPT = "<image>What is in this picture?"


@pytest.fixture(scope="module")
def vlm(manifest):
    with cellm.Engine(manifest=manifest, model=FOLDER) as engine:
        yield engine


def test_text_with_image_equals_cellm_host(vlm, manifest):
    assert vlm.info.model_takes_images
    want = host_run(PROMPT, 8, manifest=manifest, model=str(FOLDER), images=(str(IMAGE),))
    png = IMAGE.read_bytes()
    for _turn in range(2):  # the second from the image cache
        with vlm.session(temperature=0, max_tokens=8) as session:
            session.submit(PROMPT, images=[png])
            session.wait()
            assert session.tokens == want["tokens"]
    reply = vlm.create_completion(PROMPT, images=[IMAGE], temperature=0, max_tokens=8)
    assert reply["choices"][0]["text"] == want["text"]


def test_chat_with_image_parts_equals_cellm_host(vlm, manifest):
    want = host_run(PROMPT, 8, manifest=manifest, model=str(FOLDER), images=(str(IMAGE),), chat=True)
    url = "data:image/png;base64," + base64.b64encode(IMAGE.read_bytes()).decode()
    parts = [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "What is in this picture?"}]
    reply = vlm.create_chat_completion([{"role": "user", "content": parts}], temperature=0, max_tokens=8)
    assert reply["choices"][0]["message"]["content"] == want["text"]
    by_bytes = vlm.create_chat_completion([{"role": "user", "content": PROMPT}], images=[IMAGE.read_bytes()],
                                          temperature=0, max_tokens=8)
    assert by_bytes["choices"][0]["message"]["content"] == want["text"]


def test_bad_images(vlm):
    with vlm.session(temperature=0, max_tokens=4) as session:
        with pytest.raises(cellm.PromptError, match="image 1"):
            session.submit(PROMPT, images=[b"not an image"])
        with pytest.raises(cellm.PromptError, match="2 <image> markers for 1 images"):
            session.submit("<image><image>two?", images=[IMAGE])
        with pytest.raises(ValueError):
            session.submit(PROMPT, images=["https://example.com/cat.png"])
        session.submit(PROMPT, images=[IMAGE])
        session.wait()
