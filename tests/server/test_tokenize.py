"""llama-server's POST /tokenize and POST /detokenize: ids equal `cellm-host tokenize` on the same model, pieces
are the tokens' bytes, and detokenize inverts tokenize."""
import json
import subprocess

import httpx
import pytest

TEXTS = ["Hello world", "The quick brown fox jumps over the lazy dog.", "  spaces\tand\nnewlines  ",
         "héllo wörld, 日本語 🙂", "<|im_start|>user\nhi<|im_end|>", ""]


@pytest.fixture
def http(server):
    with httpx.Client(base_url=server.url, timeout=60) as client:
        yield client
        assert client.get("/health").status_code == 200


def cli_tokenize(cellm_host, model_path, text, add_bos=False):
    args = [cellm_host, "tokenize", "--model", model_path, "--text", text, "--parse-special", "--json"]
    if add_bos:
        args.append("--add-bos")
    done = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("text", [t for t in TEXTS if t])
def test_tokenize_equals_cli(http, cellm_host, model_path, text):
    want = cli_tokenize(cellm_host, model_path, text)
    response = http.post("/tokenize", json={"content": text})
    assert response.status_code == 200, response.text
    assert response.json() == {"tokens": want["ids"]}

    pieces = http.post("/tokenize", json={"content": text, "with_pieces": True}).json()["tokens"]
    assert [p["id"] for p in pieces] == want["ids"]
    for piece, cli_piece in zip(pieces, want["pieces"]):
        # A piece that is not whole UTF-8 comes as its byte values (the CLI shows U+FFFD there).
        if isinstance(piece["piece"], list):
            with pytest.raises(UnicodeDecodeError):
                bytes(piece["piece"]).decode("utf-8")
            assert "\ufffd" in cli_piece
        else:
            assert piece["piece"] == cli_piece


def test_add_special_follows_the_model(http, cellm_host, model_path):
    text = "Hello world"
    plain = http.post("/tokenize", json={"content": text}).json()["tokens"]
    special = http.post("/tokenize", json={"content": text, "add_special": True}).json()["tokens"]
    # add_special adds BOS only where the model asks for it (as the SDK's tokenize does).
    assert special in (plain, cli_tokenize(cellm_host, model_path, text, add_bos=True)["ids"])


@pytest.mark.parametrize("text", TEXTS)
def test_detokenize_inverts_tokenize(http, text):
    tokens = http.post("/tokenize", json={"content": text}).json()["tokens"]
    response = http.post("/detokenize", json={"tokens": tokens})
    assert response.status_code == 200, response.text
    assert response.json() == {"content": text}


def test_detokenize_without_tokens_is_empty(http):
    assert http.post("/detokenize", json={}).json() == {"content": ""}


BAD = {
    "tokenize without content": ("/tokenize", {}, "content"),
    "tokenize content a number": ("/tokenize", {"content": 5}, "content"),
    "tokenize parse_special false": ("/tokenize", {"content": "hi", "parse_special": False}, "parse_special"),
    "tokenize with_pieces a string": ("/tokenize", {"content": "hi", "with_pieces": "yes"}, "with_pieces"),
    "detokenize negative id": ("/detokenize", {"tokens": [1, -1]}, "tokens"),
    "detokenize id past the vocabulary": ("/detokenize", {"tokens": [49152]}, "tokens"),
    "detokenize huge id": ("/detokenize", {"tokens": [2 ** 63]}, "tokens"),
    "detokenize a string id": ("/detokenize", {"tokens": ["a"]}, "tokens"),
    "detokenize tokens not a list": ("/detokenize", {"tokens": 5}, "tokens"),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_requests(http, case):
    path, body, field = BAD[case]
    response = http.post(path, json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == field and error["message"]


def test_get_is_405(http):
    response = http.get("/tokenize")
    assert response.status_code == 405 and response.headers["Allow"] == "POST"
