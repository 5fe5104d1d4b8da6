"""Grammars, JSON schemas and logit bias through the binding (cellm.h 1.4), on the synthetic model: its random
weights would never write JSON by themselves, so an answer that parses is the constraint's doing."""

from __future__ import annotations

import json

import pytest

import cellm

SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer", "minimum": 0,
                                                                             "maximum": 9}},
          "required": ["ok", "n"]}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_json_schema_answers_parse_and_fit(engine, seed):
    with engine.session(json_schema=SCHEMA, temperature=1.0, seed=seed, max_tokens=200) as session:
        session.submit("anything")
        assert session.wait() == "eog"  # the grammar ended the turn, not max_tokens
        value = json.loads(session.text)
    assert set(value) == {"ok", "n"} and isinstance(value["ok"], bool) and 0 <= value["n"] <= 9


def test_gbnf_grammar(engine):
    with engine.session(grammar='root ::= "yes" | "no"', temperature=1.0, seed=7, max_tokens=50) as session:
        session.submit("say")
        session.wait()
        assert session.text in ("yes", "no")


def test_response_format_in_the_completion_calls(engine):
    reply = engine.create_chat_completion([{"role": "user", "content": "hi"}], max_tokens=200, seed=4,
                                          response_format={"type": "json_object"})
    assert isinstance(json.loads(reply["choices"][0]["message"]["content"]), dict)
    reply = engine.create_completion("x", max_tokens=200, seed=5, response_format={
        "type": "json_schema", "json_schema": {"name": "answer", "schema": SCHEMA, "strict": True}})
    assert set(json.loads(reply["choices"][0]["text"])) == {"ok", "n"}
    with pytest.raises(ValueError, match="response_format type"):
        engine.create_completion("x", response_format={"type": "yaml"})


def test_refused_grammars_name_the_problem(engine):
    with pytest.raises(cellm.GrammarError, match='"not"') as refused:
        engine.session(json_schema={"not": {"type": "string"}})
    assert refused.value.name == "CELLM_E_GRAMMAR"
    with pytest.raises(cellm.GrammarError, match="undefined"):
        engine.session(grammar="root ::= missing")
    with pytest.raises(TypeError):
        engine.session(grammar=b"root ::= \"a\"")


def test_logit_bias(engine):
    with engine.session(temperature=0, max_tokens=6) as session:
        session.submit("the cat")
        session.wait()
        free = session.tokens
    banned = free[0]
    favoured = (banned + 1) % engine.info.n_vocab
    with engine.session(temperature=0, max_tokens=6, logit_bias={banned: -1e30, favoured: 0.0}) as session:
        session.submit("the cat")
        session.wait()
        assert banned not in session.tokens
    reply = engine.create_completion("the cat", temperature=0, max_tokens=4, logit_bias={str(favoured): 1e4})
    with engine.session(temperature=0, max_tokens=4, logit_bias={favoured: 1e4}) as session:
        session.submit("the cat")
        session.wait()
        assert session.tokens == [favoured] * 4
        assert reply["choices"][0]["text"] == session.text
