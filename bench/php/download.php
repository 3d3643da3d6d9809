<?php
// §6 : GET /download.php?fichier=<nom>&token=<TOKEN_ACCES>, la conception du cahier des charges
// (servie par php-fpm dans bench/run).
require __DIR__ . '/config.php';
// 1. Balayage d'expiration de tout DOSSIER_FICHIERS (§7.3).
nettoyer_fichiers_expires();
// 2. Le paramètre token, sinon 401.
$token = $_GET['token'] ?? '';
if (!is_string($token) || !hash_equals(TOKEN_ACCES, $token)) {
    journal('GET /download.php — token invalide — REFUSÉ');
    erreur(401, 'token_invalide', 'Token absent ou invalide.');
}
// 3. Nom assaini (400), fichier et sidecar présents (404).
$nom = nom_assaini($_GET['fichier'] ?? '');
if ($nom === null) {
    erreur(400, 'nom_invalide', 'Nom de fichier invalide.');
}
$chemin = DOSSIER_FICHIERS . $nom;
$chemin_sidecar = DOSSIER_SIDECARS . $nom . '.json';
if (!is_file($chemin) || !is_file($chemin_sidecar)) {
    journal('GET /download.php — fichier introuvable "' . $nom . '" — REFUSÉ');
    erreur(404, 'fichier_introuvable', 'Fichier introuvable ou expiré.');
}
// 4. Expiré (§7.2) : supprimé avec son sidecar, et le même 404 qu'un fichier inexistant.
if (est_expire($nom, time())) {
    @unlink($chemin);
    @unlink($chemin_sidecar);
    journal('GET /download.php — fichier introuvable "' . $nom . '" — REFUSÉ');
    erreur(404, 'fichier_introuvable', 'Fichier introuvable ou expiré.');
}
// 5. Envoi : application/octet-stream, le nom d'origine, Content-Length.
header('Content-Type: application/octet-stream');
header('Content-Disposition: attachment; filename="' . str_replace(['"', '\\'], '_', $nom) . '"');
header('Content-Length: ' . filesize($chemin));
readfile($chemin);
// 6. mtime = maintenant : la date du dernier téléchargement (le sidecar n'est jamais modifié).
touch($chemin);
// 7. Journal (§10).
journal('GET /download.php — téléchargement "' . $nom . '" — OK');
