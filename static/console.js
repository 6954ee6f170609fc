// The console's copy buttons: copy the text of the element named by data-copy. No third parties.
document.addEventListener("click", async (event) => {
  const button = event.target.closest("button[data-copy]");
  if (!button) return;
  const source = document.getElementById(button.dataset.copy);
  try {
    await navigator.clipboard.writeText(source.textContent.trim());
    button.textContent = "Copied";
  } catch {
    window.getSelection().selectAllChildren(source);  // no clipboard access: select it for Ctrl+C
    button.textContent = "Selected";
  }
});
