"""A response that satisfies one criterion on its own (shows the criterion is checkable)."""

SAMPLES = {  # a sentence per language langdetect recognises reliably
    "es": "El perro corre por el parque mientras los niños juegan con una pelota roja.",
    "fr": "Le petit chat dort sur le canapé pendant que la pluie tombe doucement dehors.",
    "de": "Der alte Mann liest jeden Morgen die Zeitung und trinkt dabei einen Kaffee.",
    "it": "Il vecchio pescatore racconta storie del mare ai bambini del villaggio.",
    "pt": "O menino brinca no jardim enquanto a sua mãe prepara o almoço na cozinha.",
    "ru": "Сегодня утром мы гуляли по городу и пили горячий чай в маленьком кафе.",
    "ja": "今日はとても良い天気なので、公園で散歩をしました。",
    "ko": "오늘은 날씨가 아주 좋아서 공원에서 산책을 했습니다.",
    "hi": "आज मौसम बहुत अच्छा है और हम बाजार जा रहे हैं।",
    "ar": "ذهب الأطفال إلى المدرسة في الصباح الباكر مع أصدقائهم.",
    "fi": "Vanha kalastaja kertoo lapsille tarinoita merestä joka ilta.",
    "pl": "Stary rybak opowiada dzieciom historie o morzu każdego wieczoru.",
    "vi": "Hôm nay trời rất đẹp nên chúng tôi đi dạo trong công viên.",
    "th": "วันนี้อากาศดีมากเราจึงไปเดินเล่นในสวนสาธารณะ",
    "he": "הילדים הלכו לבית הספר מוקדם בבוקר עם החברים שלהם.",
    "uk": "Сьогодні вранці ми гуляли містом і пили гарячий чай у маленькій кав'ярні.",
    "bg": "Днес сутринта се разхождахме из града и пихме горещ чай в малко кафене.",
}
ENGLISH = "the weather is lovely today and we are going for a long walk in the park."


def witness(iid, kw):
  """A response passing `iid` with `kw` in strict mode."""
  less = lambda rel: rel == "less than"  # noqa: E731
  if iid == "keywords:existence":
    return " ".join(kw["keywords"]) + " appear here."
  if iid == "keywords:frequency":
    return "123" if less(kw["relation"]) else " ".join([kw["keyword"]] * kw["frequency"])
  if iid == "keywords:letter_frequency":
    return "123" if less(kw["let_relation"]) else kw["letter"] * kw["let_frequency"]
  if iid == "language:response_language":
    return SAMPLES.get(kw["language"], "12345")  # langdetect: undetectable passes, as in IFEval
  if iid == "length_constraints:number_sentences":
    return "One." if less(kw["relation"]) else "Yes. " * kw["num_sentences"]
  if iid == "length_constraints:number_paragraphs":
    return "\n***\n".join(["Text."] * kw["num_paragraphs"])
  if iid == "length_constraints:number_words":
    return "word" if less(kw["relation"]) else "word " * kw["num_words"]
  if iid == "length_constraints:nth_paragraph_first_word":
    paras = ["Text here."] * kw["num_paragraphs"]
    paras[kw["nth_paragraph"] - 1] = kw["first_word"].capitalize() + ", more text."
    return "\n\n".join(paras)
  if iid == "detectable_content:number_placeholders":
    return "[x] " * kw["num_placeholders"]
  if iid == "detectable_content:postscript":
    return "Hello.\n" + kw["postscript_marker"] + " note"
  if iid == "detectable_format:number_bullet_lists":
    return "\n".join(["* item"] * kw["num_bullets"])
  if iid == "detectable_format:number_highlighted_sections":
    return "*h* " * kw["num_highlights"]
  if iid == "detectable_format:multiple_sections":
    return "\n".join(f"{kw['section_spliter']} {i + 1}\ntext" for i in range(kw["num_sections"]))
  if iid == "combination:repeat_prompt":
    return kw["prompt_to_repeat"] + " Answer."
  if iid == "startend:end_checker":
    return "Text. " + kw["end_phrase"]
  if iid == "change_case:capital_word_frequency":
    return "word" if less(kw["capital_relation"]) else "WORD " * kw["capital_frequency"]
  fixed = {"keywords:forbidden_words": "123", "detectable_format:constrained_response":
           "My answer is yes.", "detectable_format:json_format": '{"a": 1}',
           "detectable_format:title": "<<t>>", "combination:two_responses": "A\n******\nB",
           "change_case:english_capital": ENGLISH.upper(),
           "change_case:english_lowercase": ENGLISH, "punctuation:no_comma": "No commas.",
           "startend:quotation": '"quoted"'}
  return fixed[iid]
