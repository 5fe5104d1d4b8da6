"""Images in chat completions: image_url content parts with base64 data: URLs, on the tiny random SmolVLM folder
(tests/data/hf/smolvlm-tiny, scalar backend) against transformers' reference for it (its reference.json, written by
scripts/hf_reference/smolvlm.py), and the 400s for images the server does not take. The models come from the
repository, so this module needs no fetched model; each server starts in well under a second."""
import base64
import json

import httpx
import openai
import pytest

from support import REPO, Server, assert_ends_with_done, collect_stream, recording_client

SMOLVLM = REPO / "tests/data/hf/smolvlm-tiny"
TEXT_ONLY_MODEL = REPO / "tests/data/hf/qwen3-tiny"
REFERENCE = json.loads((SMOLVLM / "reference.json").read_text())
CASE = REFERENCE["cases"]["image"]
IMAGE = (REPO / CASE["image"]).read_bytes()
QUESTION = "What is in this picture?"
# Room for the oversized image below: its base64 is about 28 MB.
MAX_BODY_BYTES = 32 << 20
MAX_IMAGE_BYTES = 20 << 20


def data_url(data, media_type="image/png"):
    return f"data:{media_type};base64," + base64.b64encode(data).decode()


def image_message(url, text=QUESTION):
    return [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                         {"type": "text", "text": text}]}]


def byte_level_decode(token_ids):
    """What transformers' tokenizer.decode gives for these tokens of the folder's byte-level BPE tokenizer: each
    character of a token maps back to the byte GPT-2's bytes_to_unicode gave it, and malformed UTF-8 becomes U+FFFD
    (as the server's JSON writer replaces it)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    char_to_byte, extra = {}, 0
    for b in range(256):
        if b in printable:
            char_to_byte[chr(b)] = b
        else:
            char_to_byte[chr(256 + extra)] = b
            extra += 1
    vocab = json.loads((SMOLVLM / "tokenizer.json").read_text())["model"]["vocab"]
    token_text = {i: t for t, i in vocab.items()}
    return bytes(char_to_byte[c] for i in token_ids for c in token_text[i]).decode("utf-8", errors="replace")


@pytest.fixture(scope="module")
def vision_server(cellm_host):
    server = Server(cellm_host, SMOLVLM, ("--max-body-bytes", str(MAX_BODY_BYTES)), backend="scalar")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def vision_client(vision_server):
    return vision_server.client()


@pytest.fixture(scope="module")
def vision_model(vision_server):
    return vision_server.model_id()


def ask(client, model, messages, **kwargs):
    return client.chat.completions.create(model=model, messages=messages, temperature=0, max_tokens=8, **kwargs)


# How the expected numbers follow from the reference. The folder has no chat template, so the server renders
# with the plain template: the one user message's content as it is, with no BOS (the folder's tokenizer adds none;
# the reference's input_ids start with <fake_token_around_image>). The server writes the image part as "<image>"
# with nothing around it, so the rendered prompt is exactly the reference's "<image>What is in this picture?" and
# has its 46 tokens. Greedy decoding then gives the reference's first token, 120: the byte 0xBC alone, malformed
# UTF-8, which arrives as U+FFFD. The reference's second greedy token, 11, is where generation ends: the folder
# names no end-of-text token, and cellm takes llama.cpp's default for byte-level BPE vocabularies, 11 (see
# tests/hf/smolvlm_test.cpp). So the answer is one token, ended by "stop", not the 8 of max_tokens.
def test_reference_prompt_is_what_the_server_renders():
    assert CASE["prompt"] == "<image>" + QUESTION
    assert CASE["n_tokens"] == len(CASE["input_ids"]) == 46
    assert CASE["greedy"][:2] == [120, 11]
    assert byte_level_decode([120]) == "\ufffd"


def test_image_answer_matches_transformers(vision_client, vision_model):
    response = ask(vision_client, vision_model, image_message(data_url(IMAGE)))
    assert response.usage.prompt_tokens == CASE["n_tokens"]
    assert response.choices[0].message.content == byte_level_decode(CASE["greedy"][:1])
    assert response.usage.completion_tokens == 1
    assert response.choices[0].finish_reason == "stop"


def test_image_answer_streams(vision_server, vision_model):
    client, transport = recording_client(vision_server)
    stream = ask(client, vision_model, image_message(data_url(IMAGE)), stream=True,
                 stream_options={"include_usage": True})
    text, finish_reasons, usage = collect_stream(stream, "chat")
    assert text == byte_level_decode(CASE["greedy"][:1])
    assert finish_reasons == ["stop"]
    assert [u.prompt_tokens for u in usage] == [CASE["n_tokens"]]
    assert_ends_with_done(transport.bodies[-1])


def test_forms_clients_send(vision_server, vision_client, vision_model):
    # "image_url" as the URL string itself (some clients), "detail" (ignored), image/jpeg's alias image/jpg and an
    # upper-case media type: the same prompt as above. The declared type is not checked against the bytes.
    for image_url in (data_url(IMAGE), {"url": data_url(IMAGE), "detail": "high"}, data_url(IMAGE, "IMAGE/JPG")):
        body = {"model": vision_model, "temperature": 0, "max_tokens": 8,
                "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": image_url},
                                                          {"type": "text", "text": QUESTION}]}]}
        response = httpx.post(vision_server.base_url + "/chat/completions", json=body, timeout=60)
        assert response.status_code == 200, response.text
        assert response.json()["usage"]["prompt_tokens"] == CASE["n_tokens"], str(image_url)[:60]


def test_two_images_and_no_image(vision_client, vision_model):
    # Each image of this size is 22 tokens (the reference's 46 less the 24 of its text alone, cases.text).
    text_tokens = len(REFERENCE["cases"]["text"]["input_ids"])
    image_tokens = CASE["n_tokens"] - text_tokens
    two = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": data_url(IMAGE)}},
                                        {"type": "image_url", "image_url": {"url": data_url(IMAGE)}},
                                        {"type": "text", "text": QUESTION}]}]
    assert ask(vision_client, vision_model, two).usage.prompt_tokens == 2 * image_tokens + text_tokens
    text_only = [{"role": "user", "content": QUESTION}]
    assert ask(vision_client, vision_model, text_only).usage.prompt_tokens == text_tokens


PNG_BASE64 = base64.b64encode(IMAGE).decode()
# (image_url.url, error code, a piece of the message). Malformed base64 is refused by the server itself; files
# that are not PNG or JPEG go to the engine, whose message names the image.
BAD_IMAGES = {
    "http URL": ("http://example.com/cat.png", "unsupported_value", "remote image URLs"),
    "https URL": ("https://example.com/cat.png", "unsupported_value", "remote image URLs"),
    "file path": ("/tmp/cat.png", "invalid_value", "data URL"),
    "not base64": ("data:image/png," + PNG_BASE64, "invalid_value", "base64"),
    "GIF": ("data:image/gif;base64," + PNG_BASE64, "unsupported_value", "PNG and JPEG"),
    "no data": ("data:image/png;base64,", "invalid_value", "no image data"),
    "bad character": ("data:image/png;base64,iVBO!w0K" + PNG_BASE64[8:], "invalid_value", "'!' at offset 4"),
    "line break": ("data:image/png;base64," + PNG_BASE64[:76] + "\n" + PNG_BASE64[76:], "invalid_value",
                   "byte 0x0a at offset 76"),
    "URL-safe base64": ("data:image/png;base64," + PNG_BASE64[:8] + "-_" + PNG_BASE64[10:], "invalid_value",
                        "URL-safe"),
    "length not a multiple of 4": ("data:image/png;base64," + PNG_BASE64[:-1], "invalid_value", "multiple of 4"),
    "padding inside": ("data:image/png;base64,iVBO=w0K", "invalid_value", "not at the end"),
    "nonzero bits before padding": ("data:image/png;base64,QR==", "invalid_value", "bits set"),
    "text, not an image": (data_url(b"What is in this picture? Not a picture."), "invalid_prompt", "image 1"),
    "truncated PNG": (data_url(IMAGE[:len(IMAGE) // 2]), "invalid_prompt", "image 1"),
}


@pytest.mark.parametrize("case", BAD_IMAGES)
def test_bad_image_is_400(vision_server, vision_client, vision_model, case):
    url, code, message = BAD_IMAGES[case]
    with pytest.raises(openai.BadRequestError) as raised:
        ask(vision_client, vision_model, image_message(url))
    error = raised.value.response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["code"] == code, error
    assert message in error["message"], error
    if code != "invalid_prompt":
        assert error["param"] == "messages[0].content[0].image_url.url", error
    assert httpx.get(vision_server.url + "/health", timeout=10).status_code == 200


def test_part_errors_name_the_part(vision_client, vision_model):
    cases = [({"type": "image_url"}, "messages[0].content[1].image_url", "missing_required_parameter"),
             ({"type": "image_url", "image_url": {"detail": "low"}}, "messages[0].content[1].image_url.url",
              "missing_required_parameter"),
             ({"type": "image_url", "image_url": 5}, "messages[0].content[1].image_url", "invalid_type"),
             ({"type": "input_audio", "input_audio": {}}, "messages[0].content[1].type", "unsupported_value")]
    for part, param, code in cases:
        with pytest.raises(openai.BadRequestError) as raised:
            ask(vision_client, vision_model, [{"role": "user", "content": [{"type": "text", "text": "hi"}, part]}])
        assert (raised.value.code, raised.value.param) == (code, param), raised.value.message


def test_marker_written_as_text_is_400(vision_client, vision_model):
    # "<image>" typed in the text is one more marker than there are images: the engine refuses the prompt.
    with pytest.raises(openai.BadRequestError) as raised:
        ask(vision_client, vision_model, image_message(data_url(IMAGE), "<image> and " + QUESTION))
    assert raised.value.code == "invalid_prompt"
    assert "2 <image> markers for 1 images" in raised.value.message


def test_image_over_the_limit_is_400(vision_server, vision_model):
    # Refused from the base64's length, before decoding; the body itself is under --max-body-bytes.
    too_large = data_url(bytes(MAX_IMAGE_BYTES + 1))
    response = httpx.post(vision_server.base_url + "/chat/completions", timeout=60,
                          json={"model": vision_model, "messages": image_message(too_large), "max_tokens": 1})
    assert response.status_code == 400, response.text
    assert "larger than 20 MiB" in response.json()["error"]["message"]


def test_text_only_model_refuses_images(cellm_host):
    server = Server(cellm_host, TEXT_ONLY_MODEL, backend="scalar")
    try:
        client = server.client()
        with pytest.raises(openai.BadRequestError) as raised:
            ask(client, server.model_id(), image_message(data_url(IMAGE)))
        assert raised.value.code == "unsupported_value"
        assert raised.value.param == "messages[0].content[0]"
        assert "the model takes no images" in raised.value.message
        assert raised.value.response.json()["error"]["type"] == "invalid_request_error"
        # Text still works.
        assert ask(client, server.model_id(), [{"role": "user", "content": QUESTION}]).usage.completion_tokens >= 1
    finally:
        server.stop()
