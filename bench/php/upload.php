<?php
// §5 : POST /upload.php, la conception du cahier des charges (servie par php-fpm dans bench/run).
require __DIR__ . '/config.php';
// 1. Balayage d'expiration de tout DOSSIER_FICHIERS (§7.3).
nettoyer_fichiers_expires();
// 2. Authorization: Bearer <TOKEN_ACCES>, sinon 401.
$auth = $_SERVER['HTTP_AUTHORIZATION'] ?? '';
if (!preg_match('/^Bearer\s+(\S+)\s*$/i', $auth, $m) || !hash_equals(TOKEN_ACCES, $m[1])) {
    journal('POST /upload.php — token invalide — REFUSÉ');
    erreur(401, 'token_invalide', 'Token absent ou invalide.');
}
// 3. Un fichier dans le champ « fichier » (400), pas plus de TAILLE_MAX_FICHIER_OCTETS (413).
if (!isset($_FILES['fichier']) || $_FILES['fichier']['error'] === UPLOAD_ERR_NO_FILE) {
    erreur(400, 'fichier_absent', 'Aucun fichier dans le champ « fichier ».');
}
$f = $_FILES['fichier'];
if (!is_int($f['error'])) { // fichier[]=… : plusieurs fichiers sous ce nom
    erreur(400, 'requete_invalide', 'Un seul fichier attendu dans le champ « fichier ».');
}
if ($f['error'] === UPLOAD_ERR_INI_SIZE || $f['error'] === UPLOAD_ERR_FORM_SIZE
    || $f['size'] > TAILLE_MAX_FICHIER_OCTETS) {
    erreur(413, 'fichier_trop_volumineux', 'Fichier trop volumineux.');
}
if ($f['error'] !== UPLOAD_ERR_OK) {
    erreur(400, 'requete_invalide', 'Dépôt incomplet.');
}
// 4. Nom assaini (§9), sinon 400.
$nom = nom_assaini($f['name']);
if ($nom === null) {
    erreur(400, 'nom_invalide', 'Nom de fichier invalide.');
}
// 5. et 6. Déplacé dans DOSSIER_FICHIERS (files/ et .meta/ créés au besoin, chmod 700, §3) ; un
// fichier du même nom est écrasé.
if (!is_dir(DOSSIER_SIDECARS)) {
    @mkdir(DOSSIER_SIDECARS, 0700, true);
}
if (!move_uploaded_file($f['tmp_name'], DOSSIER_FICHIERS . $nom)) {
    erreur(500, 'erreur_interne', 'Écriture impossible.');
}
// 7. Le sidecar (§7.1), créé ou écrasé : la date de dépôt.
$sidecar = ['nom_original' => $nom, 'depot_timestamp' => time(), 'taille_octets' => $f['size']];
file_put_contents(DOSSIER_SIDECARS . $nom . '.json', json_encode($sidecar, JSON_UNESCAPED_UNICODE));
// 9. Journal (§10) ; 8. réponse (§5.3).
journal('POST /upload.php — dépôt "' . $nom . '" (' . $f['size'] . ' octets) — OK');
repondre_json(200, [
    'succes' => true,
    'nom' => $nom,
    'taille_octets' => $f['size'],
    'url_telechargement' => URL_BASE . '/download.php?fichier=' . rawurlencode($nom) . '&token=' . TOKEN_ACCES,
    'expire_au_plus_tard_dans_secondes' => DUREE_MAX_DEPOT_SECONDES,
]);
