"""A model folder's tokenizer.json and chat_template: prompts rendered and tokenized the way
transformers' apply_chat_template does, checked against hand-worked strings and ids."""

import json

import pytest

from specplan.errors import ConfigError
from specplan.workloads.loaders import load_chat
from specplan.workloads.model_folder import ModelFolder

SPECIALS = ["<|im_start|>", "<|im_end|>", "<s>"]  # ids 0, 1, 2: trained first
# A multi-line ChatML template: trim_blocks / lstrip_blocks decide its whitespace, as in HF folders.
CHATML = """{% for message in messages %}
    {% if loop.first and message['role'] != 'system' %}
{{ bos_token }}<|im_start|>system
You are terse.<|im_end|>
    {% elif loop.first %}
{{ bos_token }}
    {% endif %}
    {% if message['role'] not in ['system', 'user', 'assistant'] %}
{{ raise_exception('bad role ' + message['role']) }}
    {% endif %}
<|im_start|>{{ message['role'] }}
{{ message['content'] | trim }}<|im_end|>
{% endfor %}
{% if add_generation_prompt %}
<|im_start|>assistant
{% endif %}"""


def make_folder(path, template=CHATML):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = ["You are terse.", "Hi there, how are you?", "Fine thanks. And you?", "system user assistant"] * 20
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=400, special_tokens=SPECIALS, show_progress=False,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    path.mkdir()
    tok.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps({
        "bos_token": "<s>", "eos_token": {"__type": "AddedToken", "content": "<|im_end|>", "lstrip": False, "rstrip": False,
                                                     "normalized": False, "single_word": False, "special": True}, "chat_template": template}))
    return tok


def test_template_renders_as_hand_worked(tmp_path):
    make_folder(tmp_path / "m")
    folder = ModelFolder(tmp_path / "m")
    text = folder.render([("user", " Hi there "), ("assistant", "Fine thanks."), ("user", "And you?")])
    assert text == ("<s><|im_start|>system\nYou are terse.<|im_end|>\n"
                    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\nFine thanks.<|im_end|>\n"
                    "<|im_start|>user\nAnd you?<|im_end|>\n<|im_start|>assistant\n")
    with pytest.raises(ConfigError, match="bad role"):
        folder.render([("tool", "x")])


def test_chat_jsonl_ids_equal_the_tokenizers_own(tmp_path):
    tok = make_folder(tmp_path / "m")
    chat = tmp_path / "chat.jsonl"
    chat.write_text(json.dumps({"id": "c1", "messages": [{"role": "user", "content": "Hi there"},
                                                         {"role": "assistant", "content": "Fine thanks."}]}) + "\n")
    folder = ModelFolder(tmp_path / "m")
    (req,) = load_chat(chat, tokenizer=folder.tokenizer, template=folder.template)

    def enc(text):
        return tok.encode(text, add_special_tokens=False).ids

    # by hand: specials are their ids, the text between them encoded on its own
    im_start, im_end, bos = 0, 1, 2
    want = ([bos, im_start] + enc("system\nYou are terse.") + [im_end] + enc("\n") + [im_start]
            + enc("user\nHi there") + [im_end] + enc("\n") + [im_start] + enc("assistant\n"))
    assert req.prompt_ids.tolist() == want
    assert req.output_ids.tolist() == enc("Fine thanks.") + [im_end]  # eos_token ends the answer


def test_same_ids_as_transformers_apply_chat_template(tmp_path):
    transformers = pytest.importorskip("transformers")
    make_folder(tmp_path / "m")
    hf = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "m"))
    messages = [("user", "Hi there"), ("assistant", "Fine thanks."), ("user", "And you?")]
    chat = [{"role": r, "content": c} for r, c in messages]
    want = hf.apply_chat_template(chat, add_generation_prompt=True)
    want = want["input_ids"] if hasattr(want, "keys") else want  # transformers 5 returns a BatchEncoding
    folder = ModelFolder(tmp_path / "m")
    assert folder.render(messages) == hf.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
    assert folder.encode_chat(messages) == list(want)


def test_scenario_names_the_folder(tmp_path):
    from specplan.config import WorkloadConfig
    from specplan.workloads.traffic import build_requests

    make_folder(tmp_path / "m")
    chat = tmp_path / "chat.jsonl"
    chat.write_text("\n".join(json.dumps({"id": f"c{i}", "messages": [{"role": "user", "content": "Hi there"},
                                                                      {"role": "assistant", "content": "Fine thanks."}]})
                              for i in range(3)) + "\n")
    reqs = build_requests(WorkloadConfig(trace=str(chat), tokenizer=str(tmp_path / "m"), num_requests=3), seed=0)
    assert len(reqs) == 3 and all(r.prompt_ids[0] == 2 for r in reqs)
    with pytest.raises(ConfigError, match="workload.tokenizer"):
        build_requests(WorkloadConfig(tokenizer=str(tmp_path / "m")), seed=0)  # the bundled default trace
    with pytest.raises(ConfigError, match="tokenizer_config.json"):
        ModelFolder(tmp_path)
