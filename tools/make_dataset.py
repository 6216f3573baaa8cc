#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Token datasets for mxkit's training program (05_train / 06_train_gpu --data) from text files.

    make_dataset.py --tokenizer TOKENIZER --output PREFIX [--format megatron|packed|both]
                    [--documents paragraph|line|file] [--eod ID_OR_TOKEN] [--seq N]
                    [--answer-after MARKER] TEXT_FILE...

TOKENIZER is a Hugging Face tokenizer.json (read with the `tokenizers` package) or a sentencepiece
model (python3-sentencepiece); which one is told from the file's content (JSON or not). Every
document is tokenized without special tokens and the end-of-document token is appended to it
(as Megatron-LM's tools/preprocess_data.py --append-eod does): the tokenizer's EOS, or --eod.
Documents are the TEXT_FILEs' paragraphs (blank-line separated, the default), lines, or files.

Formats (docs/training.md describes both; mxkit's readers are include/mxkit/train/):
  megatron  PREFIX.idx + PREFIX.bin, Megatron-LM's indexed dataset (megatron/core/datasets/
            indexed_dataset.py): one sequence per document, uint16 tokens for vocabularies
            under 65500, int32 above (DType.optimal_dtype), version 1, dtype codes 8 / 4.
  packed    PREFIX.npy, int32 [rows, --seq + 1], and PREFIX.loss_mask.npy, bool, the same shape:
            documents packed whole into rows in order (first fit: a document that does not fit in
            the current row starts the next one; one longer than a row is cut, and counted),
            rows padded with the end-of-document token, padding masked out. mask[r][t] = 1 when
            token t of row r is a target the loss counts (NeMo's alignment: labels are input_ids
            shifted by one). With --answer-after MARKER, a document's text up to and including
            the first MARKER is its prompt: its tokens are masked out, the answer's and the
            end-of-document token count (e.g. --answer-after "A:" for data/qa.txt).

Needs numpy and one of the tokenizer packages; exits 2 with a message on a bad argument, a
missing package or an unreadable file.
"""
import argparse
import os
import struct
import sys


def fail(msg):
    print("make_dataset.py: error: " + msg, file=sys.stderr)
    sys.exit(2)


try:
    import numpy as np
except ImportError:
    fail("numpy is not installed (Debian: apt-get install python3-numpy)")


class Tokenizer:
    """encode(text) -> list of ids; vocab_size; eos (an id or None)."""

    def __init__(self, path):
        try:
            with open(path, "rb") as f:
                head = f.read(64).lstrip()
        except OSError as e:
            fail("--tokenizer '%s': %s" % (path, e.strerror or e))
        if head.startswith(b"{"):
            try:
                from tokenizers import Tokenizer as HFTokenizer
            except ImportError:
                fail("--tokenizer '%s' is a Hugging Face tokenizer.json, and the tokenizers package is not installed "
                     "(pip install tokenizers), or give a sentencepiece model" % path)
            try:
                self.hf = HFTokenizer.from_file(path)
            except Exception as e:  # the package's own error types vary by version
                fail("--tokenizer '%s': not a readable tokenizer.json: %s" % (path, e))
            self.sp = None
            self.vocab_size = self.hf.get_vocab_size(with_added_tokens=True)
            self.eos = None
            for name in ("</s>", "<|endoftext|>", "<|end_of_text|>", "<eos>", "<|eot_id|>"):
                if self.hf.token_to_id(name) is not None:
                    self.eos = self.hf.token_to_id(name)
                    break
        else:
            try:
                import sentencepiece as spm
            except ImportError:
                fail("--tokenizer '%s' is not JSON, so it is taken for a sentencepiece model, and the sentencepiece "
                     "package is not installed (Debian: apt-get install python3-sentencepiece)" % path)
            self.sp = spm.SentencePieceProcessor()
            try:
                ok = self.sp.Load(path)
            except Exception as e:
                fail("--tokenizer '%s': not a sentencepiece model (nor a tokenizer.json): %s" % (path, e))
            if not ok:
                fail("--tokenizer '%s': sentencepiece could not load it" % path)
            self.hf = None
            self.vocab_size = self.sp.GetPieceSize()
            self.eos = self.sp.eos_id() if self.sp.eos_id() >= 0 else None

    def encode(self, text):
        if self.sp is not None:
            return list(self.sp.EncodeAsIds(text))
        return list(self.hf.encode(text, add_special_tokens=False).ids)

    def encode_many(self, texts):
        """encode() of each text, the tokenizer's own threads over the list (a large corpus)."""
        if self.sp is None:
            return [e.ids for e in self.hf.encode_batch(list(texts), add_special_tokens=False)]
        try:
            return self.sp.encode(list(texts), num_threads=os.cpu_count() or 1)
        except TypeError:  # sentencepiece before 0.1.99: no num_threads
            return [self.encode(t) for t in texts]

    def token_id(self, token):
        if self.sp is not None:
            i = self.sp.PieceToId(token)
            return i if i != self.sp.unk_id() or token == self.sp.IdToPiece(self.sp.unk_id()) else None
        return self.hf.token_to_id(token)


def documents(paths, how):
    for p in paths:
        try:
            with open(p, "r", encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            fail("'%s': %s" % (p, e.strerror or e))
        except UnicodeDecodeError as e:
            fail("'%s' is not UTF-8 text: %s" % (p, e))
        if how == "file":
            parts = [text]
        elif how == "line":
            parts = text.split("\n")
        else:
            parts = text.split("\n\n")
        for part in parts:
            if part.strip():
                yield part.strip("\n")


def write_megatron(prefix, docs, vocab_size):
    # megatron/core/datasets/indexed_dataset.py: _IndexWriter.write, DType codes, optimal_dtype.
    dtype, code = (np.uint16, 8) if vocab_size < 65500 else (np.int32, 4)
    lengths = [len(d) for d in docs]
    with open(prefix + ".bin", "wb") as f:
        for d in docs:
            f.write(np.asarray(d, dtype=dtype).tobytes(order="C"))
    pointers = np.zeros(len(docs), dtype=np.int64)
    if docs:
        pointers[1:] = np.cumsum(np.asarray(lengths[:-1], dtype=np.int64)) * np.dtype(dtype).itemsize
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", code))
        f.write(struct.pack("<Q", len(docs)))
        f.write(struct.pack("<Q", len(docs) + 1))  # document indices: 0, 1, ..., n (one sequence a document)
        f.write(np.asarray(lengths, dtype=np.int32).tobytes(order="C"))
        f.write(pointers.tobytes(order="C"))
        f.write(np.arange(len(docs) + 1, dtype=np.int64).tobytes(order="C"))
    return "%s.idx + %s.bin: %d documents, %d tokens (%s)" % (prefix, prefix, len(docs), sum(lengths), np.dtype(dtype).name)


def read_megatron_tokens(prefix):
    """The tokens of PREFIX.idx + PREFIX.bin, memory-mapped, documents in file order (what the
    peers in bench/ read): the header as write_megatron writes it, element type from its code."""
    try:
        with open(prefix + ".idx", "rb") as f:
            head = f.read(18)
    except OSError as e:
        fail("'%s.idx': %s" % (prefix, e.strerror or e))
    if head[:9] != b"MMIDIDX\x00\x00" or len(head) < 18 or struct.unpack("<Q", head[9:17])[0] != 1:
        fail("'%s.idx' is not a Megatron indexed dataset of version 1" % prefix)
    dtypes = {8: np.uint16, 4: np.int32}
    if head[17] not in dtypes:
        fail("'%s.idx': token type code %d, expected 8 (uint16) or 4 (int32)" % (prefix, head[17]))
    return np.memmap(prefix + ".bin", dtype=dtypes[head[17]], mode="r")


def write_packed(prefix, docs, masks, row, pad):
    rows, row_masks, cur, cur_mask, cut = [], [], [], [], 0
    for d, m in zip(docs, masks):
        if len(d) > row:
            d, m, cut = d[:row], m[:row], cut + 1
        if len(cur) + len(d) > row:
            rows.append(cur)
            row_masks.append(cur_mask)
            cur, cur_mask = [], []
        cur, cur_mask = cur + d, cur_mask + m
    if cur:
        rows.append(cur)
        row_masks.append(cur_mask)
    tokens = np.full((len(rows), row), pad, dtype=np.int32)
    mask = np.zeros((len(rows), row), dtype=np.bool_)
    for i, (r, m) in enumerate(zip(rows, row_masks)):
        tokens[i, :len(r)] = r
        mask[i, :len(m)] = m
    np.save(prefix + ".npy", tokens)
    np.save(prefix + ".loss_mask.npy", mask)
    note = "; %d documents longer than a row were cut to %d tokens" % (cut, row) if cut else ""
    return "%s.npy + %s.loss_mask.npy: %d rows of %d tokens, %d counted in the loss%s" % (
        prefix, prefix, len(rows), row, int(mask.sum()), note)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 2)[2])
    ap.add_argument("inputs", nargs="+", metavar="TEXT_FILE")
    ap.add_argument("--tokenizer", required=True, help="tokenizer.json (Hugging Face) or a sentencepiece model")
    ap.add_argument("--output", required=True, metavar="PREFIX", help="writes PREFIX.idx/.bin and/or PREFIX.npy/.loss_mask.npy")
    ap.add_argument("--format", choices=["megatron", "packed", "both"], default="both")
    ap.add_argument("--documents", choices=["paragraph", "line", "file"], default="paragraph",
                    help="what a document is (default: paragraphs, separated by blank lines)")
    ap.add_argument("--eod", help="end-of-document token, an id or a token (default: the tokenizer's EOS)")
    ap.add_argument("--seq", type=int, default=128, help="packed rows hold --seq + 1 tokens (default 128)")
    ap.add_argument("--answer-after", metavar="MARKER", help="packed: mask out each document's text up to its first MARKER")
    a = ap.parse_args(argv)
    if a.seq < 1:
        fail("--seq must be at least 1, got %d" % a.seq)
    tok = Tokenizer(a.tokenizer)
    eod = tok.eos
    if a.eod is not None:
        eod = int(a.eod) if a.eod.lstrip("-").isdigit() else tok.token_id(a.eod)
        if eod is None:
            fail("--eod '%s' is not a token of the tokenizer" % a.eod)
    if eod is None:
        fail("the tokenizer has no end-of-sequence token; name one with --eod (an id or a token)")
    if not 0 <= eod < tok.vocab_size:
        fail("--eod %d is outside the tokenizer's vocabulary [0, %d)" % (eod, tok.vocab_size))
    out_dir = os.path.dirname(a.output) or "."
    if not os.path.isdir(out_dir):
        fail("--output '%s': the folder '%s' does not exist" % (a.output, out_dir))

    docs, masks = [], []
    texts = list(documents(a.inputs, a.documents))
    if a.answer_after:
        for text in texts:
            if a.answer_after in text:
                i = text.index(a.answer_after) + len(a.answer_after)
                prompt, answer = tok.encode(text[:i]), tok.encode(text[i:])
                ids, mask = prompt + answer + [eod], [0] * len(prompt) + [1] * (len(answer) + 1)
            else:
                ids = tok.encode(text) + [eod]
                mask = [1] * len(ids)
            docs.append(ids)
            masks.append(mask)
    else:  # the whole list at once: the tokenizer's threads share it
        docs = [list(ids) + [eod] for ids in tok.encode_many(texts)]
        masks = [[1] * len(d) for d in docs]
    if not docs:
        fail("no documents in %s (empty files?)" % ", ".join(a.inputs))
    print("tokenizer: %s, vocabulary %d, end of document %d" % (a.tokenizer, tok.vocab_size, eod))
    if a.format in ("megatron", "both"):
        print(write_megatron(a.output, docs, tok.vocab_size))
    if a.format in ("packed", "both"):
        print(write_packed(a.output, docs, masks, a.seq + 1, eod))
    largest = max(max(d) for d in docs)
    print("largest token %d: the training program's default --vocab is %d (the data's largest + 1); --vocab %d covers "
          "the whole tokenizer" % (largest, largest + 1, tok.vocab_size))
    return 0


if __name__ == "__main__":
    sys.exit(main())
