"""Writes tests/fixtures/ood/: a handful of rows in the official MMLU-Pro and
LiveCodeBench formats, and `full` records (JSON lines, packed by the test with
skpo-cat --pack) holding model-like responses with known verdicts.
The LiveCodeBench private tests of the first row are compressed as the official
release stores them: base64(zlib(pickle(json string))). Run from the repo root."""
import base64, json, pickle, zlib

D = "tests/fixtures/ood/"

mmlu = [
    {"question_id": 70, "question": "Which of the following is a prime number?",
     "options": ["21", "27", "29", "33", "35", "39", "N/A", "45", "49", "51"],
     "answer": "C", "answer_index": 2, "cot_content": "A: Let's think step by step. 29 is prime. The answer is (C).",
     "category": "math", "src": "ori_mmlu-elementary_mathematics"},
    {"question_id": 71, "question": "What is 6 times 7?",
     "options": ["36", "40", "42", "48"], "answer": "C", "answer_index": 2, "cot_content": "",
     "category": "math", "src": "ori_mmlu-elementary_mathematics"},
    {"question_id": 2001, "question": "Which organelle makes ATP?",
     "options": ["Nucleus", "Ribosome", "Golgi apparatus", "Mitochondrion", "Lysosome"],
     "answer": "D", "answer_index": 3, "cot_content": "", "category": "biology", "src": "stemez-Biology"},
    {"question_id": 2002, "question": "DNA is made of?",
     "options": ["Amino acids", "Nucleotides", "Lipids", "Sugars only"],
     "answer": "B", "answer_index": 1, "cot_content": "", "category": "biology", "src": "stemez-Biology"},
]
with open(D + "mmlu_pro.jsonl", "w") as f:
    for r in mmlu:
        f.write(json.dumps(r) + "\n")

def compress(cases):
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(cases)))).decode()

lcb = [
    {"question_title": "Double It", "question_content": "Given an integer N, print 2N.\n\nInput\n\nN\n\nOutput\n\nPrint 2N.",
     "platform": "atcoder", "question_id": "abc999_a", "contest_id": "abc999", "contest_date": "2024-08-03T00:00:00",
     "starter_code": "", "difficulty": "easy",
     "public_test_cases": json.dumps([{"input": "3\n", "output": "6\n", "testtype": "stdin"}]),
     "private_test_cases": compress([{"input": "10\n", "output": "20\n", "testtype": "stdin"},
                                     {"input": "-4\n", "output": "-8\n", "testtype": "stdin"}]),
     "metadata": "{}"},
    {"question_title": "two-sum", "question_content": "Given nums and target, return the indices of the two numbers that add up to target.",
     "platform": "leetcode", "question_id": "9001", "contest_id": "weekly-contest-999", "contest_date": "2024-09-15T00:00:00",
     "starter_code": "class Solution:\n    def twoSum(self, nums: List[int], target: int) -> List[int]:\n        ",
     "difficulty": "medium",
     "public_test_cases": json.dumps([{"input": "[2, 7, 11, 15]\n9", "output": "[0, 1]", "testtype": "functional"}]),
     "private_test_cases": json.dumps([{"input": "[3, 2, 4]\n6", "output": "[1, 2]", "testtype": "functional"}]),
     "metadata": json.dumps({"func_name": "twoSum"})},
    {"question_title": "Old One", "question_content": "Print the sum of two integers A and B.",
     "platform": "codeforces", "question_id": "1700A", "contest_id": "1700", "contest_date": "2023-01-10T00:00:00",
     "starter_code": "", "difficulty": "hard",
     "public_test_cases": json.dumps([{"input": "1 2\n", "output": "3\n", "testtype": "stdin"}]),
     "private_test_cases": "[]", "metadata": "{}"},
]
with open(D + "livecodebench.jsonl", "w") as f:
    for r in lcb:
        f.write(json.dumps(r) + "\n")

def full(uid, pid, source, text, **kw):
    r = {"kind": "full", "uid": uid, "gid": pid, "pid": pid, "source": source, "text": text, "finish": "stop"}
    r.update(kw)
    return r

# choice: expected correct per record in the comment
choice = [
    full("m70-0", "70", "mmlu_pro", "29 has no divisors other than 1 and itself. The answer is (C).", task="choice", answer="C", category="math"),  # yes
    full("m70-1", "70", "mmlu_pro", "So we get \\boxed{B}.", task="choice", answer="C", category="math"),                    # no: another letter
    full("m70-2", "70", "mmlu_pro", "It could be either. The answer is (B) or (C).", task="choice", answer="C", category="math"),  # no: hedged
    full("m71-0", "71", "mmlu_pro", "C. Because 6 * 7 = 42.", task="choice", answer="C", category="math"),                   # yes
    full("m71-1", "71", "mmlu_pro", "I am not sure about this one.", task="choice", answer="C", category="math"),          # no: none
    full("m71-2", "71", "mmlu_pro", "6*7 = 42, option C.\n\nAnswer: C", task="choice", answer="C", category="math"),         # yes
    full("b1-0", "2001", "mmlu_pro", "Mitochondria make ATP. the answer is (D)", task="choice", answer="D", category="biology"),  # yes
    full("b1-1", "2001", "mmlu_pro", "The answer is \\boxed{\\text{D}}", task="choice", answer="D", category="biology"),   # yes
    full("b1-2", "2001", "mmlu_pro", "The answer is A, B and D.", task="choice", answer="D", category="biology"),         # no: hedged
    full("b2-0", "2002", "mmlu_pro", "The answer is (A) because amino acids... wait, the answer is (B).", task="choice", answer="B", category="biology"),  # yes: the last statement
    full("b2-1", "2002", "mmlu_pro", "The answer is (B).", task="choice", answer="B", category="biology", finish="length"),  # no: truncated
    full("b2-2", "2002", "mmlu_pro", "Answer: (A)", task="choice", answer="B", category="biology"),                         # no
]
with open(D + "choice_full.jsonl", "w") as f:
    for r in choice:
        f.write(json.dumps(r) + "\n")

stdin_tests = json.dumps({"inputs": ["3\n", "10\n", "-4\n"], "outputs": ["6\n", "20\n", "-8\n"]})
fn_tests = json.dumps({"inputs": ["[2, 7, 11, 15]\n9", "[3, 2, 4]\n6"], "outputs": ["[0, 1]", "[1, 2]"], "fn_name": "twoSum"})
def code(uid, pid, tests, diff, body):
    return full(uid, pid, "livecodebench", body, task="code", tests=tests, difficulty=diff)
block = lambda c: "Here is my solution.\n```python\n" + c + "```\n"
codes = [
    code("c1-0", "abc999_a", stdin_tests, "easy", block("n = int(input())\nprint(2 * n)\n")),                     # yes
    code("c1-1", "abc999_a", stdin_tests, "easy", block("n = int(input())\nprint(n + 3)\n")),                     # no: wrong on test 2
    code("c1-2", "abc999_a", stdin_tests, "easy", block("while True:\n    pass\n")),                              # no: timeout
    code("c2-0", "9001", fn_tests, "medium", block("class Solution:\n    def twoSum(self, nums, target):\n        d = {}\n"
                                                   "        for i, x in enumerate(nums):\n            if target - x in d:\n"
                                                   "                return [d[target - x], i]\n            d[x] = i\n")),  # yes
    code("c2-1", "9001", fn_tests, "medium", block("class Solution:\n    def twoSum(self, nums, target):\n        raise ValueError('boom')\n")),  # no: crash
    code("c2-2", "9001", fn_tests, "medium", "I would use a hash map."),                                         # no: no code
]
with open(D + "code_full.jsonl", "w") as f:
    for r in codes:
        f.write(json.dumps(r) + "\n")
