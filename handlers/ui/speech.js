// The Playground's Speech tab: a recording chosen from disk or made with the microphone, sent to
// /v1/audio/transcriptions (or /v1/audio/translations) as the OpenAI SDK sends it, and the answer
// shown as text and, for verbose_json, as a table of timed segments (and words). Uses
// playground.js's `$`, `api` and `errorText`.
"use strict";

let speechModel = "whisper"; // any name reaches the speech model; /v1/models says which it is
let speechAvailable = true; // until /v1/models says otherwise
let recording = null; // { recorder, chunks } while the microphone records
let speechSource = null; // { blob, name } to send

async function loadSpeech() {
  try {
    const response = await api("/v1/models");
    if (!response.ok) return;
    const models = await response.json();
    const listed = (models.data || []).find((m) => m.kind === "speech");
    if (listed) speechModel = listed.id;
    const speech = models.speech || { available: false, reason: "This server says nothing of speech." };
    $("speech-status").textContent = speech.available ? `Speech model: ${speechModel}` : speech.reason;
    speechAvailable = speech.available;
    $("speech-run").disabled = !speechAvailable;
  } catch {
    /* the form still works; a refusal shows as its error */
  }
}

function setSource(blob, name) {
  speechSource = { blob, name };
  $("speech-source-name").textContent = `${name} (${Math.round(blob.size / 1024)} KiB)`;
}

function chooseFile() {
  const file = $("speech-file").files[0];
  if (file) setSource(file, file.name);
}

async function toggleRecording() {
  if (recording) {
    recording.recorder.stop();
    return;
  }
  $("speech-error").textContent = "";
  try {
    const stream = await navigator.mediaDevices.getUserMedia({ audio: true });
    const recorder = new MediaRecorder(stream);
    recording = { recorder, chunks: [] };
    recorder.addEventListener("dataavailable", (event) => recording.chunks.push(event.data));
    recorder.addEventListener("stop", () => {
      for (const track of stream.getTracks()) track.stop();
      const type = recorder.mimeType || "audio/webm";
      setSource(new Blob(recording.chunks, { type }), type.includes("ogg") ? "recording.ogg" : "recording.webm");
      recording = null;
      $("speech-record").textContent = "Record";
      $("speech-record").classList.remove("recording");
    });
    recorder.start();
    $("speech-record").textContent = "Stop recording";
    $("speech-record").classList.add("recording");
  } catch (error) {
    $("speech-error").textContent = `The microphone could not be used: ${error.message || error}`;
  }
}

function speechForm() {
  const translate = $("speech-task").value === "translate";
  const format = $("speech-format").value;
  const form = new FormData();
  form.append("file", speechSource.blob, speechSource.name);
  form.append("model", speechModel);
  form.append("response_format", format);
  const prompt = $("speech-prompt").value.trim();
  if (prompt) form.append("prompt", prompt);
  const language = $("speech-language").value.trim();
  if (language && !translate) form.append("language", language);
  if ($("speech-words").checked && format === "verbose_json" && !translate) {
    form.append("timestamp_granularities[]", "segment");
    form.append("timestamp_granularities[]", "word");
  }
  return { form, path: translate ? "/v1/audio/translations" : "/v1/audio/transcriptions", format };
}

function seconds(value) {
  return `${value.toFixed(2)} s`;
}

function showSegments(answer) {
  const table = $("speech-segments");
  table.replaceChildren();
  const segments = answer.segments || [];
  if (!segments.length) return;
  const head = table.insertRow();
  for (const name of ["start", "end", "text"]) head.appendChild(Object.assign(document.createElement("th"), { textContent: name }));
  const words = answer.words || [];
  for (const segment of segments) {
    const row = table.insertRow();
    row.insertCell().textContent = seconds(segment.start);
    row.insertCell().textContent = seconds(segment.end);
    row.cells[0].className = row.cells[1].className = "time";
    const text = row.insertCell();
    text.textContent = segment.text.trim();
    const timed = words.filter((word) => word.start >= segment.start && word.end <= segment.end + 0.01);
    if (timed.length) text.title = timed.map((word) => `${word.word.trim()} ${seconds(word.start)}–${seconds(word.end)}`).join("\n");
  }
}

async function transcribe(event) {
  event.preventDefault();
  $("speech-error").textContent = "";
  if (!speechSource) {
    $("speech-error").textContent = "Choose a recording or record one first.";
    return;
  }
  const { form, path, format } = speechForm();
  $("speech-run").disabled = true;
  $("speech-text").textContent = "";
  $("speech-segments").replaceChildren();
  try {
    const response = await api(path, { method: "POST", body: form });
    if (!response.ok) {
      $("speech-error").textContent = await errorText(response);
      return;
    }
    if (format === "json" || format === "verbose_json") {
      const answer = await response.json();
      $("speech-text").textContent = answer.text;
      showSegments(answer);
    } else {
      $("speech-text").textContent = await response.text();
    }
  } catch (error) {
    $("speech-error").textContent = `The request failed: ${error.message || error}`;
  } finally {
    $("speech-run").disabled = !speechAvailable;
  }
}

$("speech-file").addEventListener("change", chooseFile);
$("speech-record").addEventListener("click", toggleRecording);
$("speech-form").addEventListener("submit", transcribe);
$("tab-speech").addEventListener("click", loadSpeech);
